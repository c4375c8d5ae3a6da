"""Type inference: unification with holes plus a solver for operator type relations.

`infer_types(mod)` checks every global function of a module and fills `checked_type` on every
node; `infer_expr(expr, mod)` types one standalone expression. Shapes are part of tensor types,
so shape errors are type errors (`autorelay.TypeCheckError`).
"""

from autorelay.typing.module import infer_expr, infer_types

__all__ = ["infer_expr", "infer_types"]
