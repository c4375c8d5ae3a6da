"""MatmulToDense: products with a constant right operand take the packed dense form.

ONNX `MatMul` (and PyTorch's `x @ W`) arrive as `nn.matmul(x, W)` with `W` of shape `(K, N)`;
Relay's dense keeps its weight as `(N, K)`. This pass rewrites

* `nn.matmul(x, W)`                 -> `nn.dense(x, transpose(W))`
* `nn.matmul(x, W, transpose_b)`    -> `nn.dense(x, W)`
* `nn.batch_matmul(x, W)` (`W` of shape `(B, K, N)`, transpose_b=False)
                                    -> `nn.batch_matmul(x, transpose(W, (0, 2, 1)))`
* the same with a batch-1 `W` and an untransposed `x` -> `nn.dense(x, transpose(reshape(W)))`

whenever `W` is constant (a `Constant`, or an expression of constants that FoldConstant
evaluates), `x` has rows (rank >= 2, not transposed). The FoldConstant that follows computes the
transposed weight once at build time, so the kernel is the `nn.dense` family's: its weight packed
to `[N/NR, K, NR]` at bind time, its workload in the same tuning-log family as every other dense
layer (so schedules transfer between them). The result is the same product; only the order of
the float32 additions may differ from the untransposed kernel's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autorelay.ir.expr import Call, Constant, Expr, Function, GlobalVar, Tuple
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator
from autorelay.op.registry import call
from autorelay.transform.fold_constant import foldable
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import op_name, static_shape, tensor_type


def is_constant_expr(e: Expr) -> bool:
    """A Constant, or a tree of foldable calls (and tuples) over constants: what FoldConstant folds."""
    if isinstance(e, Constant):
        return True
    if isinstance(e, Tuple):
        return all(is_constant_expr(f) for f in e.fields)
    return isinstance(e, Call) and foldable(e) and all(is_constant_expr(a) for a in e.args)


def _dense_form(c: Call, x: Expr, w: Expr) -> Expr | None:
    """The rewrite of one product call `c` (with rewritten operands `x`, `w`), or None."""
    op = op_name(c)
    a = c.attrs
    if op not in ("nn.matmul", "nn.batch_matmul") or a["transpose_a"] or not is_constant_expr(w):
        return None
    xt, ws = tensor_type(c.args[0]), static_shape(c.args[1])  # x may have symbolic batch axes
    if xt is None or ws is None or len(xt.shape) < 2:
        return None
    dtype = {"out_dtype": a["out_dtype"]}
    if op == "nn.matmul":
        weight = w if a["transpose_b"] else call("transpose", w, axes=(1, 0))
        return call("nn.dense", x, weight, units=a["units"], **dtype)
    if ws[0] == 1:  # a weight shared by every batch: one dense over the batch axes
        flat = call("reshape", w, newshape=(ws[1], ws[2]))
        weight = flat if a["transpose_b"] else call("transpose", flat, axes=(1, 0))
        return call("nn.dense", x, weight, **dtype)
    if a["transpose_b"]:
        return None  # already the packed form
    return call("nn.batch_matmul", x, call("transpose", w, axes=(0, 2, 1)), transpose_b=True, **dtype)


class _Rewrite(ExprMutator):
    def visit_function(self, f: Function) -> Expr:
        return f if f.is_primitive else super().visit_function(f)

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        if not isinstance(new, Call) or len(new.args) != 2:
            return new
        out = _dense_form(c, new.args[0], new.args[1])
        return new if out is None else out


@dataclass(frozen=True)
class MatmulToDense(FunctionPass):
    """Rewrite products with a constant right operand to nn.dense (see the module docstring);
    run FoldConstant after it."""

    name: ClassVar[str] = "MatmulToDense"
    requires_types: ClassVar[bool] = True

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        out = _Rewrite().visit(fn)
        assert isinstance(out, Function)
        return out
