"""SimplifyInference: rewrite training-time ops into their inference-time arithmetic.

* `nn.batch_norm(x, gamma, beta, mu, var).0` → `x * s + (beta - mu * s)` with `s = gamma / sqrt(var + eps)`,
  the per-channel vectors broadcast along `axis` (`center=False` drops beta, `scale=False` drops gamma).
  The scale and shift are built from the moving statistics, which are constants in a deployed
  model, so FoldConstant turns them into two constant vectors and FoldScaleAxis can then push the
  scale into the preceding convolution's weights.
* `nn.dropout(x).0` → `x` (dropout is the identity at inference).
* `nn.layer_norm(x, gamma, beta)` → `(x - mean) / sqrt(var + eps) * gamma + beta` over `axis`, only
  with `decompose_layer_norm=True`: by default it stays one op, whose compute is one kernel (row
  statistics computed once per row, then the normalised row), where the arithmetic form takes four
  kernels and passes over the data.

Only field 0 of the tuple-valued ops is rewritten; the call is looked up through `let`-bound
variables too, so the pass works on graph form and A-normal form alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autorelay.ir.expr import Call, Expr, Function, GlobalVar, Let, TupleGetItem, Var
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator, post_order
from autorelay.op.registry import call
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import const_like, op_name, tensor_type


def _broadcast_along(v: Expr, axis: int, ndim: int) -> Expr:
    """A per-channel vector reshaped so it broadcasts against rank-`ndim` data along `axis`."""
    trailing = ndim - 1 - axis
    return call("expand_dims", v, axis=1, num_newaxis=trailing) if trailing > 0 else v


def batch_norm_inference(bn: Call) -> Expr | None:
    data, gamma, beta, mean, var = bn.args
    t = tensor_type(data)
    if t is None:
        return None
    a = bn.attrs
    axis = int(a["axis"]) % t.ndim
    eps = const_like(float(a["epsilon"]), t.dtype)
    s: Expr = call("divide", const_like(1.0, t.dtype), call("sqrt", call("add", var, eps)))
    if a["scale"]:
        s = call("multiply", s, gamma)
    shift: Expr = call("negative", call("multiply", mean, s))
    if a["center"]:
        shift = call("add", shift, beta)
    out = call("multiply", data, _broadcast_along(s, axis, t.ndim))
    return call("add", out, _broadcast_along(shift, axis, t.ndim))


def layer_norm_inference(ln: Call) -> Expr | None:
    data, gamma, beta = ln.args
    t = tensor_type(data)
    if t is None:
        return None
    a = ln.attrs
    axis = int(a["axis"]) % t.ndim
    mean = call("mean", data, axis=[axis], keepdims=True)
    centered = call("subtract", data, mean)
    var = call("mean", call("multiply", centered, centered), axis=[axis], keepdims=True)
    eps = const_like(float(a["epsilon"]), t.dtype)
    out: Expr = call("divide", centered, call("sqrt", call("add", var, eps)))
    if a["scale"]:
        out = call("multiply", out, _broadcast_along(gamma, axis, t.ndim))
    if a["center"]:
        out = call("add", out, _broadcast_along(beta, axis, t.ndim))
    return out


class _Inference(ExprMutator):
    def __init__(self, let_values: dict[int, Expr], decompose_layer_norm: bool) -> None:
        super().__init__()
        self.let_values = let_values
        self.decompose_layer_norm = decompose_layer_norm
        self.rewrites = 0

    def _resolve(self, e: Expr) -> Expr:
        while isinstance(e, Var) and id(e) in self.let_values:
            e = self.let_values[id(e)]
        return e

    def visit_function(self, f: Function) -> Expr:
        return f if f.is_primitive else super().visit_function(f)

    def visit_tuple_getitem(self, t: TupleGetItem) -> Expr:
        if t.index == 0:
            src = self._resolve(t.tuple_value)
            name = op_name(src)
            if name == "nn.dropout":
                self.rewrites += 1
                return self.visit(src.args[0])  # type: ignore[union-attr]
            if name == "nn.batch_norm":
                assert isinstance(src, Call)
                new_args = tuple(self.visit(a) for a in src.args)
                out = batch_norm_inference(_typed_args(Call(src.op, new_args, src.attrs), src))
                if out is not None:
                    self.rewrites += 1
                    return out
        return super().visit_tuple_getitem(t)

    def visit_call(self, c: Call) -> Expr:
        if self.decompose_layer_norm and op_name(c) == "nn.layer_norm":
            new = super().visit_call(c)
            out = layer_norm_inference(new if new is c else _typed_args(new, c))  # type: ignore[arg-type]
            if out is not None:
                self.rewrites += 1
                return out
            return new
        return super().visit_call(c)


def _typed_args(new: Call, old: Call) -> Call:
    # The rewrite reads the data's type; rewritten arguments keep the old ones' types.
    for n, o in zip(new.args, old.args):
        if not n.has_checked_type and o.has_checked_type:
            n.set_checked_type(o.checked_type)
    return new


@dataclass(frozen=True)
class SimplifyInference(FunctionPass):
    """Lower batch_norm (and, when asked, layer_norm) to arithmetic and drop dropout, for inference."""

    name: ClassVar[str] = "SimplifyInference"
    requires_types: ClassVar[bool] = True
    decompose_layer_norm: bool = False

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        lets = {id(n.var): n.value for n in post_order(fn) if isinstance(n, Let)}
        out = _Inference(lets, self.decompose_layer_norm).visit(fn)
        assert isinstance(out, Function)
        return out
