"""The ONNX graph layer: loading models, per-parameter axes, and the bridge between encodings and Q/DQ models.

Importing this package loads ``onnx``.
"""
