"""Det: the determinants of a batch of square matrices, by Gaussian elimination with partial
pivoting (as LAPACK's LU factorisation, which NumPy's `det` calls), unrolled over the matrix size.

The matrix size is static, so each of its n elimination steps is a handful of batched tensor ops
that all compile: the pivot row is the one of largest magnitude at or below the diagonal
(`argmax`), swapped into place by one-hot arithmetic (no gather), and its multiples subtracted
from the rows below. The determinant is the product of the pivots, negated per swap. A zero pivot
(a singular matrix) makes the product 0; the division it would have needed divides by 1 instead,
so nothing becomes NaN.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


@_reg("Det")
def _det(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    shape = g.static_shape(x, "the input")
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise node.fail(f"Det needs square matrices in the last two axes, got shape {shape}")
    if not g.dtype(x).startswith("float"):
        raise node.fail(f"Det needs a float input, got {g.dtype(x)}")
    n, batch = shape[-1], shape[:-2]
    b = int(np.prod(batch, dtype=np.int64))
    if n == 0:
        return g.call("ones", shape=batch, dtype=g.dtype(x))
    a = g.call("reshape", x, newshape=(b, n, n))
    dtype = g.dtype(x)
    rows = np.arange(n)

    def const(v: np.ndarray) -> Expr:
        return g.const(np.asarray(v, dtype))

    def part(m: Expr, begin: tuple, end: tuple, newshape: tuple) -> Expr:
        return g.call("reshape", g.call("strided_slice", m, begin=begin, end=end), newshape=newshape)

    def column(m: Expr, k: int) -> Expr:  # m[:, :, k] as (B, n)
        return part(m, (0, 0, k), (b, n, k + 1), (b, n))

    det = sign = None
    for k in range(n):
        # the pivot: the row at or below k whose entry in column k is largest in magnitude
        below = g.call("where", g.const(rows >= k), g.call("abs", column(a, k)), const(-1.0))
        p = g.call("argmax", below, axis=[1], keepdims=True)  # (B, 1)
        at_p = g.call("cast", g.call("equal", g.const(rows.astype("int64")),
                                     g.call("cast", p, dtype="int64")), dtype=dtype)  # (B, n) one-hot
        row_p = g.call("sum", g.call("multiply", a, g.call("expand_dims", at_p, axis=2)), axis=[1])  # (B, n)
        row_k = part(a, (0, k, 0), (b, k + 1, n), (b, n))
        change = g.call("expand_dims", g.call("subtract", row_p, row_k), axis=1)  # (B, 1, n)
        at_k = const((rows == k).reshape(1, n, 1))
        a = g.call("add", a, g.call("multiply", g.call("subtract", at_k, g.call("expand_dims", at_p, axis=2)),
                                    change))  # rows k and p swapped (nothing moves when p = k)
        swapped = g.call("subtract", const(1.0), part(at_p, (0, k), (b, k + 1), (b,)))
        flip = g.call("subtract", const(1.0), g.call("multiply", const(2.0), swapped))  # -1 per swap
        pivot = part(row_p, (0, k), (b, k + 1), (b,))
        det = pivot if det is None else g.call("multiply", det, pivot)
        sign = flip if sign is None else g.call("multiply", sign, flip)
        if k == n - 1:
            break
        safe = g.call("where", g.call("equal", pivot, const(0.0)), const(1.0), pivot)
        factors = g.call("multiply", g.call("divide", column(a, k), g.call("expand_dims", safe, axis=1)),
                         const(rows > k))  # (B, n): zero at and above the pivot row
        a = g.call("subtract", a, g.call("multiply", g.call("expand_dims", factors, axis=2),
                                         g.call("expand_dims", row_p, axis=1)))
    return g.call("reshape", g.call("multiply", det, sign), newshape=batch)
