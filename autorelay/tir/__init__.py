"""Loop IR: buffers, loops, loads/stores, allocations, conditionals; simplifier; verifier; printer."""

from autorelay.tir.nodes import Allocate, Buffer, For, If, PrimFunc, Seq, Stmt, Store
from autorelay.tir.printer import func_str, structural_hash
from autorelay.tir.simplify import simplify, simplify_stmt
from autorelay.tir.verify import VerifyError, verify

__all__ = [
    "Allocate",
    "Buffer",
    "For",
    "If",
    "PrimFunc",
    "Seq",
    "Stmt",
    "Store",
    "VerifyError",
    "func_str",
    "simplify",
    "simplify_stmt",
    "structural_hash",
    "verify",
]
