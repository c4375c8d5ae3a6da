"""The O0 pipeline (no optimisation) on the graph executor, against the reference interpreter:
let-bound programs, and one op applied both to an input and to an unfolded bound constant (one
workload key, two parameter/constant splits)."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.codegen import resolve_target
from autorelay.graph_builder import BuildError, GraphBuilder
from autorelay.ir.expr import Let, Var


def _check(src, params, *args):
    mod = autorelay.parse(src)
    want = autorelay.evaluate(autorelay.transform.bind_params(mod, params) if params else mod, *args)
    for executor in ("graph", "vm", "aot"):
        got = autorelay.build(mod, params=params, executor=executor, pipeline="O0")(*args)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_let_bindings():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    _check("""#[version = "0.0.5"]
def @main(%x: Tensor[(3, 4), float32]) {
  let %a = exp(%x); let %b = add(%a, %a); multiply(%b, %a)
}""", None, x)


def test_one_op_on_an_input_and_on_a_bound_constant():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3)).astype("float32"), rng.standard_normal((2, 3)).astype("float32")
    _check("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(2, 3), float32]) { add(abs(%x), abs(%w)) }""", {"w": w}, x)


def test_a_let_reaching_the_graph_builder_is_named():
    """Without the graph normal form a let-bound variable used to be reported as free."""
    x = Var("x", autorelay.ir.TensorType((2,), "float32"))
    a = Var("a")
    fn = autorelay.ir.Function((x,), Let(a, autorelay.op.call("exp", x), autorelay.op.call("add", a, a)))
    mod = autorelay.infer_types(autorelay.ir.IRModule({autorelay.ir.GlobalVar("main"): fn}))
    with pytest.raises(BuildError, match="let bindings in @main; run ToGraphNormalForm"):
        GraphBuilder(resolve_target("llvm", 1), None).build(mod["main"])
