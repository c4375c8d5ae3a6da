"""Fused primitive functions (from FuseOps) lower to one compute DAG with injective stages inlined;
workload keys are stable and ignore weight values."""

from __future__ import annotations

import numpy as np
import pytest
from lower_helpers import assert_close, reference_outputs, run_lowered

import autorelay
from autorelay.ir.expr import Function, Var, const
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType
from autorelay.lower import describe_workload, lower, workload_key
from autorelay.op import registry
from autorelay.te.expr import Reduce
from autorelay.te.tensor import topo_order
from autorelay.transform import FuseOps, primitive_functions

pytestmark = pytest.mark.cpu


def fused(src: str) -> list[Function]:
    mod = autorelay.parse('#[version = "0.0.5"]\n' + src)
    return primitive_functions(FuseOps()(mod))


def check(fn: Function, seed: int = 0, rtol: float = 1e-4) -> None:
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(-1, 1, p.type_annotation.concrete_shape).astype(p.type_annotation.dtype)
              for p in fn.params]
    assert_close(run_lowered(fn, inputs), reference_outputs(fn, inputs), rtol=rtol, atol=rtol)


def stages(fn: Function) -> list:
    return [t for t in topo_order(lower(fn).cdef.outputs) if t.op is not None]


CONV_BIAS_RELU = """
def @main(%x: Tensor[(1, 3, 10, 10), float32], %w: Tensor[(8, 3, 3, 3), float32], %b: Tensor[(8), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1]);
  %1 = nn.bias_add(%0, %b);
  nn.relu(%1)
}"""


def test_conv_bias_relu_is_one_kernel_with_inlined_epilogue():
    (fn,) = fused(CONV_BIAS_RELU)
    check(fn)
    st = stages(fn)
    # the reduction, the kept padding stage and one output stage holding bias + relu
    assert sum(isinstance(t.op.body, Reduce) for t in st) == 1
    assert [t.op.tag for t in st if t.op.tag == "pad"] == ["pad"]
    assert len(st) == 3


def test_dense_add_with_constant_weight():
    w = np.random.default_rng(1).standard_normal((13, 21)).astype("float32")
    src = """
def @main(%x: Tensor[(5, 21), float32], %w: Tensor[(13, 21), float32], %y: Tensor[(5, 13), float32]) {
  %0 = nn.dense(%x, %w);
  add(%0, %y)
}"""
    mod = autorelay.parse('#[version = "0.0.5"]\n' + src)
    mod = autorelay.transform.bind_params(mod, {"w": w})
    (fn,) = primitive_functions(FuseOps()(mod))
    lowered = lower(fn)
    assert [s.kind for s in lowered.sources] == ["param", "param", "const"]
    check(fn)


def test_elementwise_chain_inlines_to_one_stage():
    (fn,) = fused("""
def @main(%x: Tensor[(4, 37), float32], %y: Tensor[(37), float32]) {
  %0 = add(%x, %y);
  %1 = exp(%0);
  %2 = multiply(%1, 0.5f);
  %3 = tanh(%2);
  subtract(%3, %x)
}""")
    check(fn)
    assert len(stages(fn)) == 1


def test_reduction_with_injective_producers():
    (fn,) = fused("""
def @main(%x: Tensor[(3, 5, 17), float32]) {
  %0 = multiply(%x, %x);
  %1 = transpose(%0, axes=[0, 2, 1]);
  sum(%1, axis=[2])
}""")
    check(fn)
    st = stages(fn)
    assert len(st) == 1 and isinstance(st[0].op.body, Reduce)


def test_tuple_output_function():
    (fn,) = fused("""
def @main(%x: Tensor[(4, 10), float32]) {
  split(%x, indices_or_sections=[3, 7], axis=1)
}""")
    assert len(lower(fn).cdef.outputs) == 3
    check(fn)


def test_workload_key_ignores_weight_values_but_not_shapes_or_scalars():
    def make(weight: np.ndarray, scale: float, n: int = 5) -> Function:
        x = Var("x", TensorType((n, 8), "float32"))
        dense = registry.call("nn.dense", x, const(weight))
        body = registry.call("multiply", dense, const(np.float32(scale)))
        m = autorelay.infer_types(IRModule.from_expr(Function((x,), body)))
        return primitive_functions(FuseOps()(m))[0]

    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((4, 8)).astype("float32"), rng.standard_normal((4, 8)).astype("float32")
    k1 = workload_key(make(w1, 2.0))
    assert k1 == workload_key(make(w1, 2.0))
    assert k1 == workload_key(make(w2, 2.0))  # other weights, same workload
    assert k1 != workload_key(make(w1, 3.0))  # a scalar changes the computation
    assert k1 != workload_key(make(w1, 2.0, n=6))  # other shape
    desc = describe_workload(make(w1, 2.0))
    assert desc["family"] == "nn.dense"
    assert desc["shapes"] == [[5, 8], [4, 8], [5, 4]]
    assert desc["dtypes"] == ["float32"] * 3
    assert desc["ops"] == ["nn.dense", "multiply"]
