"""What the ONNX import tests share: a model from a list of nodes, and a check of an executable's
outputs against ONNX Runtime's (the oracle), shapes and dtypes included. Import it after
`pytest.importorskip("onnxruntime")`."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def value_info(name: str, shape: Any, t: int = TensorProto.FLOAT) -> Any:
    return helper.make_tensor_value_info(name, t, shape)


def make_model(nodes: list, inputs: list, outputs: list, opset: int = 17) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def assert_matches_ort(exe: Any, onnx_model: Any, feeds: dict[str, np.ndarray], rtol: float = 1e-5,
                       atol: float = 1e-6) -> None:
    """`exe(*feeds.values())` equals ONNX Runtime's outputs on the same feeds."""
    sess = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    wants = sess.run(None, feeds)
    gots = exe(*feeds.values())
    gots = list(gots) if isinstance(gots, tuple | list) else [gots]
    assert len(gots) == len(wants)
    for got, want in zip(gots, wants):
        got = np.asarray(got)
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@functools.cache
def u8s8_saturates() -> bool:
    """Whether ONNX Runtime's uint8 x int8 integer products clip on this machine.

    Why: on x86 without VNNI (AVX2, AVX-512 without VNNI) its integer GEMM adds adjacent u8*s8
    products in 16 bits (VPMADDUBSW), so a pair beyond 32767 in magnitude saturates; ONNX Runtime
    documents this and recommends 7-bit weights (`reduce_range`) there. Where it clips, it is no
    oracle for full-range int8 weights, so the tests that compare with it keep weights within 7 bits
    on such machines (AutoRelay's own kernels are exact and checked against integer references).
    Asked of ONNX Runtime itself, with one pair of products that overflows 16 bits: 2 * 255 * -128."""
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    graph = helper.make_graph([node], "probe", [value_info("a", [1, 2], TensorProto.UINT8)],
                              [value_info("y", None, TensorProto.INT32)],
                              [numpy_helper.from_array(np.full((2, 1), -128, np.int8), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"a": np.full((1, 2), 255, np.uint8)})[0]
    return int(got[0, 0]) != 2 * 255 * -128


def int8_weight_bounds() -> tuple[int, int]:
    """The int8 weight values ONNX Runtime multiplies exactly by uint8 data here (see `u8s8_saturates`)."""
    return (-64, 63) if u8s8_saturates() else (-128, 127)
