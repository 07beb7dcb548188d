"""Graph rewrites as ``onnx_ir`` passes (``graph -> graph``), one per module, each tested on its own.

* :class:`~qlinear.graph.passes.insert_qdq.InsertQDQ`: Q/DQ (and Cast pairs) for a set of resolved encodings.
"""
