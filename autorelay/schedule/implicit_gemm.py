"""Implicit GEMM: a convolution stage recomputed over flat (m, p, k) axes (the `ImplicitGemm` step).

An NCHW/OIHW convolution `out[n, f, y, x] = sum_{c, r, s} data(n, c, y, x, r, s) * W[f, c, r, s]` is
the GEMM `gemm[m, p] = sum_k wt[m, k] * col[k, p]` with m = f, p = (n·OH + y)·OW + x and
k = (c·KH + r)·KW + s. Written as three computes — `wt` (the weight viewed as [OC, K]), `col` (the
im2col matrix [K, P], the data factor at the decomposed indices, padding included as its guard) and
`gemm` — the operand tiles a block needs per K-chunk are *intervals* of `wt` and `col`, so they can
be staged in shared memory by ComputeAt; the same tiles of the 4-D data are not intervals (a pixel
tile straddles rows, a K-chunk straddles channels). Nothing is materialised in global memory:
`wt` and `col` are made shared stages, computed tile by tile inside the GEMM's K loop.

The convolution stage itself becomes the view `out[n, f, y, x] = gemm[f, (n·OH + y)·OW + x]`; a
consumer that fuses (n, y, x) into one loop reads `gemm` at that fused index again (the simplifier
folds the div/mod back), so the GEMM's register tile can be computed at the consumer's thread loop.

This module builds the tensors only; `autorelay.schedule.state` turns them into stages.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autorelay.te.expr import Bin, Expr, IterVar, Read, Reduce, Var
from autorelay.te.tensor import ComputeOp, Tensor
from autorelay.te.traverse import substitute, uses_var


@dataclasses.dataclass(frozen=True)
class GemmParts:
    """The tensors that replace a convolution: operand views, the GEMM and the 4-D view of it."""

    wt: Tensor
    col: Tensor
    gemm: Tensor
    view: Tensor


def conv_operands(body: Expr, attrs: dict[str, Any], axes: list[IterVar] | tuple[IterVar, ...],
                  raxes: list[IterVar] | tuple[IterVar, ...]) -> tuple[Read, Expr] | str:
    """(weight read, data factor) of a convolution summand, or the reason it is not one: the summand
    must be a product of the OIHW weight input (`attrs["weight"]`) read at the bare axes
    [f, rc, rh, rw] and a data factor that does not depend on the output channel f (else it is no
    GEMM over f). A transposed convolution (IOHW weight, `weight_oc_axis`) reads its weight at
    phase-dependent taps: no [OC, K] matrix."""
    weight = attrs.get("weight")
    if weight is None:
        return "the stage names no weight input"
    if "weight_oc_axis" in attrs:
        return "a transposed convolution's weight is no [OC, K] matrix"
    if len(axes) != 4 or len(raxes) != 3:
        return "an implicit GEMM needs 4 spatial axes (n, f, y, x) and 3 reduction axes (c, kh, kw)"
    if not (isinstance(body, Bin) and body.op == "mul"):
        return "the summand is not a product"
    f = axes[1].var
    want = (f, *(a.var for a in raxes))
    for w, d in ((body.a, body.b), (body.b, body.a)):
        if isinstance(w, Read) and w.tensor.name == weight:
            if w.tensor.op is not None or w.indices != want:
                return f"the weight {weight} is not an input read at [f, rc, rh, rw]"
            if uses_var(d, f):
                return "the data factor depends on the output channel"
            return w, d
    return f"the summand does not read the weight {weight} directly"


def gemm_parts(name: str, shape: tuple[int, ...], dtype: str, op: ComputeOp, body: Expr,
               axes: list[IterVar] | tuple[IterVar, ...], raxes: list[IterVar] | tuple[IterVar, ...],
               weight: Read, data: Expr) -> GemmParts:
    """The flat-axis computes of the convolution stage `name` whose summand `body` is `weight` times
    `data` (as `conv_operands` found them). Axis names: wt (m, k), col (k, p), gemm (m, p; reduce k)."""
    n, f, y, x = (a.var for a in axes)
    rc, rh, rw = (a.var for a in raxes)
    nb, oc, oh, ow = shape
    kh, kw = raxes[1].extent, raxes[2].extent
    kk, pp = raxes[0].extent * kh * kw, nb * oh * ow
    m, k, p = Var("m"), Var("k"), Var("p")
    of_k: dict[Var, Expr] = {rc: k // (kh * kw), rh: k // kw % kh, rw: k % kw}
    of_p: dict[Var, Expr] = {n: p // (oh * ow), y: p // ow % oh, x: p % ow}
    wt = Tensor(f"{name}_wt", (oc, kk), weight.dtype,
                ComputeOp((IterVar(m, oc), IterVar(k, kk)), substitute(weight, {f: m, **of_k}), "injective"))
    col = Tensor(f"{name}_col", (kk, pp), data.dtype,
                 ComputeOp((IterVar(k, kk), IterVar(p, pp)), substitute(data, {**of_p, **of_k}), "injective"))
    w_new, d_new = Read(wt, (m, k), weight.dtype), Read(col, (k, p), data.dtype)
    assert isinstance(body, Bin)  # as conv_operands found it
    prod = dataclasses.replace(body, a=w_new, b=d_new) if body.a is weight else \
        dataclasses.replace(body, a=d_new, b=w_new)
    gemm = Tensor(f"{name}_gemm", (oc, pp), dtype,
                  ComputeOp((IterVar(m, oc), IterVar(p, pp)),
                            Reduce("sum", prod, (IterVar(k, kk, "reduce"),), dtype), "conv2d_igemm"))
    vaxes = tuple(IterVar(Var(a.name), a.extent) for a in axes)
    vn, vf, vy, vx = (a.var for a in vaxes)
    view = Tensor(name, shape, dtype, ComputeOp(vaxes, Read(gemm, (vf, (vn * oh + vy) * ow + vx), dtype),
                                                op.tag, op.attrs))
    return GemmParts(wt, col, gemm, view)
