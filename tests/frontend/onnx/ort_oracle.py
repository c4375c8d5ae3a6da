"""What the ONNX import tests share: a model from a list of nodes, and a check of an executable's
outputs against ONNX Runtime's (the oracle), shapes and dtypes included. Import it after
`pytest.importorskip("onnxruntime")`."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper


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
