"""`reinterpret` (ONNX BitCast): each element's bits read as another type of the same width.

Oracle: NumPy's `view`, bit for bit, on payloads that a value conversion would change (NaN with a
payload, infinities, -0.0, denormals, integers whose bits are NaNs). Compiled through
`autorelay.build` with the kernel fused between arithmetic (the op inlined into a vectorised loop
and a scalar tail), for AVX2 and AVX-512 code; the ONNX importer's BitCast against the same oracle.
"""

from __future__ import annotations

import numpy as np
import pytest
from host_widths import run_here_or_skip

import autorelay
from autorelay.errors import TypeCheckError
from autorelay.ir.types import TensorType
from autorelay.op.check import infer_op_type

pytestmark = pytest.mark.cpu

# 8 float lanes on AVX2, 16 on AVX-512: 37 leaves a scalar tail on both
N = 37
WIDTHS = {"avx2": "llvm -mcpu=znver3", "avx512": "llvm -mcpu=znver5"}


NAN_WITH_PAYLOAD = {2: 0x7E01, 4: 0x7FC0_0123, 8: 0x7FF8_0000_0000_0123}  # quiet NaNs, low bits set


def _payloads(dtype: str) -> np.ndarray:
    """`N` values of `dtype` whose bits matter: special floats, extreme integers, random bits."""
    rng = np.random.default_rng(3)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(N) > 0.5
    bits = rng.integers(0, 256, N * dt.itemsize, dtype=np.uint8).view(dt).copy()
    if dt.kind == "f":
        special = np.array([np.nan, -np.inf, np.inf, -0.0, np.finfo(dt).tiny / 4, np.finfo(dt).max], dt)
        special[0] = np.array(NAN_WITH_PAYLOAD[dt.itemsize], f"u{dt.itemsize}").view(dt)
    else:
        special = np.array([np.iinfo(dt).min, np.iinfo(dt).max, 0, 1], dt)
    bits[: len(special)] = special
    return bits


PAIRS = [("float32", "int32"), ("int32", "float32"), ("float64", "int64"), ("uint64", "float64"),
         ("float16", "int16"), ("uint16", "float16"), ("int8", "uint8"), ("uint32", "int32"),
         ("bool", "uint8")]


def _model(src: str, dst: str) -> str:
    """x's bits as `dst`, between a copy before (so the op reads a computed value) and one after."""
    return f'''
#[version = "0.0.5"]
def @main(%x: Tensor[({N},), {src}]) {{
  %0 = copy(%x);
  %1 = reinterpret(%0, dtype="{dst}");
  copy(%1)
}}
'''


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=[f"{s}-{d}" for s, d in PAIRS])
def test_compiled_bits_equal_numpy_view(src: str, dst: str, width: str):
    x = _payloads(src)
    want = x.view(dst)
    interpreted = np.asarray(autorelay.evaluate(autorelay.parse(_model(src, dst))["main"], x))
    np.testing.assert_array_equal(interpreted.view(np.uint8), want.view(np.uint8))
    exe = autorelay.build(autorelay.parse(_model(src, dst)), target=WIDTHS[width], threads=1)
    assert not exe.report.fallbacks, exe.report
    run_here_or_skip(WIDTHS[width])
    got = np.asarray(exe(x))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_widths_must_match_and_nothing_becomes_bool():
    assert infer_op_type("reinterpret", [TensorType((2, 3), "float32")], dtype="uint32") == \
        TensorType((2, 3), "uint32")
    with pytest.raises(TypeCheckError, match=r"reinterpret: data has dtype float32 \(32 bits\) but "
                                             r"dtype=int64 has 64 bits"):
        infer_op_type("reinterpret", [TensorType((2,), "float32")], dtype="int64")
    with pytest.raises(TypeCheckError, match="data has dtype uint8, whose bits cannot be read as bool"):
        infer_op_type("reinterpret", [TensorType((2,), "uint8")], dtype="bool")


def test_onnx_bitcast_imports_as_reinterpret():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from autorelay.frontend.onnx import OnnxImportError, from_onnx

    def model(to: int, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
        node = helper.make_node("BitCast", ["x"], ["y"], to=to)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, [N])],
                                  [helper.make_tensor_value_info("y", to, [N])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])

    x = _payloads("float32")
    mod, params = from_onnx(model(TensorProto.UINT32))
    got = np.asarray(autorelay.build(mod, params=params, threads=1)(x))
    np.testing.assert_array_equal(got, x.view(np.uint32))
    with pytest.raises(OnnxImportError, match="BitCast"):
        from_onnx(model(TensorProto.INT64))  # 32 bits to 64
