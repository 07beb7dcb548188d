"""The compiled fused kernel gives the same bits as the NumPy path (and is built in CI)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import qlinear
from qlinear.core import dequantize as dqm
from qlinear.core import granularity as gr
from qlinear.core import native
from qlinear.core import quantize as qm
from qlinear.core.types import qtype

INT_OUT = ["uint8", "int8", "uint16", "int16", "uint4", "int4", "uint2", "int2"]


def test_extension_is_built():
    assert native.available(), "the compiled kernel qlinear/core/_native*.so was not built by pip install"


@given(st.lists(st.integers(1, 9), min_size=1, max_size=3), st.sampled_from(["tensor", "axis", "block"]),
       st.integers(-3, 2), st.integers(1, 10), st.sampled_from(INT_OUT), st.booleans(), st.booleans(),
       st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_native_equals_numpy(shape, kind, axis, block, out, with_zp, packed, threads, seed):
    rng = np.random.default_rng(seed)
    shape = tuple(shape)
    rank = len(shape)
    axis = axis % rank
    if kind == "tensor":
        sshape = ()
    elif kind == "axis":
        sshape = (shape[axis],)
    else:
        block = min(block, shape[axis])
        sshape = tuple(-(-d // block) if i == axis else d for i, d in enumerate(shape))
    bs = block if kind == "block" else 0
    g = gr.resolve(shape, sshape, axis, bs)
    ot = qtype(out)
    s = (2.0 ** rng.integers(-4, 3, sshape)).astype(np.float32)
    z = rng.integers(ot.qmin, ot.qmax + 1, sshape).astype(ot.storage) if with_zp else None
    x = ((rng.integers(-40, 40, shape) + rng.choice([0, 0.5, 0.25], shape)) * 0.125).astype(np.float32)
    x.ravel()[rng.integers(0, x.size, 2)] = [np.nan, np.inf]
    ref = qm._quantize_numpy(x, s, z, ot, g, np.dtype(np.float32), True)
    got = qlinear.quantize_linear(x, s, z, axis=axis, block_size=bs, output_dtype=out,
                                  packed=packed and ot.is_subbyte, threads=threads)
    if packed and ot.is_subbyte:
        assert got.tobytes() == qlinear.pack(ref).tobytes()
        got = got.unpack()
    assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes()
    # dequantize back through the kernel, from unpacked and packed storage
    sd = rng.uniform(0.1, 2.0, sshape).astype(np.float32)
    ref_dq = dqm._dequantize_numpy(ref, ot, sd, z, g, qtype("float32"))
    for inp in ([ref, qlinear.pack(ref)] if ot.is_subbyte else [ref]):
        got_dq = qlinear.dequantize_linear(inp, sd, z, axis=axis, block_size=bs, threads=threads)
        assert got_dq.tobytes() == ref_dq.tobytes()


def test_large_threaded_matches_single_thread():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 1030)).astype(np.float32)
    s = rng.uniform(0.01, 0.1, (512, 33)).astype(np.float32)
    one = qlinear.quantize_linear(x, s, axis=1, block_size=32, output_dtype="int4", packed=True, threads=1)
    two = qlinear.quantize_linear(x, s, axis=1, block_size=32, output_dtype="int4", packed=True, threads=2)
    assert one.tobytes() == two.tobytes()
    out = np.empty_like(one.data)
    three = qlinear.quantize_linear(x, s, axis=1, block_size=32, output_dtype="int4", packed=True, threads=3, out=out)
    assert three.data is out and out.tobytes() == one.tobytes()


def test_threads_argument_validated():
    with pytest.raises(qlinear.QlinearError, match="threads must be an int >= 1"):
        qlinear.quantize_linear(np.zeros(3, np.float32), np.float32(1), threads=0)


@given(st.sampled_from(["uint8", "int8", "uint16", "int16", "int4", "uint4"]), st.sampled_from(["tensor", "axis0", "axis1", "block"]),
       st.integers(1, 70), st.integers(1, 70), st.booleans(), st.booleans(), st.integers(0, 2**32 - 1))
def test_streaming_dequantize_equals_numpy(itype, kind, rows, cols, with_zp, packed, seed):
    """Force the non-temporal-store path (normally only for outputs >= 8 MB) on small odd shapes."""
    rng = np.random.default_rng(seed)
    t = qtype(itype)
    x = rng.integers(t.qmin, t.qmax + 1, (rows, cols)).astype(t.storage)
    axis, bs = 1, 0
    if kind == "tensor":
        sshape = ()
    elif kind == "axis0":
        sshape, axis = (rows,), 0
    elif kind == "axis1":
        sshape = (cols,)
    else:
        bs = int(rng.integers(1, cols + 1))
        sshape = (rows, -(-cols // bs))
    s = rng.uniform(0.01, 3, sshape).astype(np.float32)
    z = rng.integers(t.qmin, t.qmax + 1, sshape).astype(t.storage) if with_zp else None
    g = gr.resolve(x.shape, sshape, axis, bs)
    ref = dqm._dequantize_numpy(x, t, s, z, g, qtype("float32"))
    old = native.STREAM_MIN_BYTES
    native.STREAM_MIN_BYTES = 0
    try:
        got = qlinear.dequantize_linear(qlinear.pack(x) if packed and t.is_subbyte else x, s, z, axis=axis,
                                        block_size=bs, threads=2)
    finally:
        native.STREAM_MIN_BYTES = old
    assert got.tobytes() == ref.tobytes()


@pytest.mark.parametrize("otype", ["int8", "uint8", "int16", "float8e4m3fn"])
def test_a_scalar_keeps_its_shape_as_the_onnx_reference_gives_it(otype):
    """QuantizeLinear's output has its input's shape, a 0-d one included (a scalar constant operand: TFLite's
    ``Sigmoid * 4 + 1`` of PLCMOS)."""
    from onnx import TensorProto, helper
    from onnx.helper import np_dtype_to_tensor_dtype
    from onnx.reference import ReferenceEvaluator

    t = qtype(otype)
    x = np.array(4.0, np.float32)
    zp = np.zeros((), t.storage)
    got = qlinear.quantize_linear(x, np.float32(0.0315), zp)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, e, []) for n, e in
                                        (("x", TensorProto.FLOAT), ("s", TensorProto.FLOAT),
                                         ("z", np_dtype_to_tensor_dtype(zp.dtype)))],
                          [helper.make_tensor_value_info("y", np_dtype_to_tensor_dtype(zp.dtype), [])])
    ref = ReferenceEvaluator(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])).run(
        None, {"x": x, "s": np.float32(0.0315), "z": zp})[0]
    assert np.asarray(got).shape == ref.shape == ()
    assert np.array_equal(np.asarray(got).view(np.uint8 if t.bits == 8 else np.uint16),
                          np.asarray(ref).view(np.uint8 if t.bits == 8 else np.uint16))
    back = qlinear.dequantize_linear(got, np.float32(0.0315), zp)
    assert back.shape == ()
