"""The operator registry: one `OpDef` holds every rule of one operator.

An op's name, argument names, attribute schema, type relation, NumPy reference, fusion pattern,
gradient and tensor compute live together in one value, registered once by its family module
(`autorelay.op.tensor`, `autorelay.op.nn`, …). Everything else — the type checker, the
interpreter, autodiff, fusion, lowering — looks the op up here and reads the field it needs.

Type relations
--------------
`type_rel(arg_types, attrs) -> Type | tuple[list[Type], Type]`

* `arg_types` are the current argument types; any of them may be (or contain) `IncompleteType`.
* Return the result type, or `(refined_arg_types, result_type)` when the relation can also infer
  argument types (e.g. a conv2d weight's shape from `channels` and `kernel_size`). The solver
  unifies refined argument types with the actual ones.
* Raise `NotReady` when an argument the relation needs is still unknown; the solver retries after
  more is known, and reports the op if it never becomes ready.
* Raise `TypeCheckError` (via `rel_error`) for an ill-typed call, naming the op, the argument and
  both shapes; the solver attaches the source location.

References
----------
`reference(attrs, *args: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]` — the test oracle
for every backend.

Tensor computes
---------------
`compute(inputs: list[te.Tensor], attrs: Attrs, out_type: Type) -> te.Tensor | list[te.Tensor]`
declares what each output element is (`autorelay.te`), never how to loop.

* `inputs` are the op's arguments in order; a tuple-typed argument (concatenate's) contributes its
  fields, in order. Boolean tensors arrive as `bool`-typed tensors.
* `out_type` is the call's inferred (static) type; computes take output shapes from it.
* Return one tensor, or a list for a tuple-typed result (`split`). Tag the main stage so a schedule
  template is chosen (`dense`, `conv2d_nchw`, `reduce`, …; `autorelay.te.nn` declarations do).
* Raise `autorelay.op.te_compute.Unsupported` when the compute cannot handle these inputs (a dtype,
  a layout); `compute=None` means the op has none. Either way `autorelay.build` runs the fused
  function on the NumPy references and reports it as a fallback kernel.

Gradients
---------
`gradient(call: Call, out_grad: Expr) -> list[Expr]` builds, in the IR, the gradient of each
argument given the gradient of the output (a `Tuple` of gradients for tuple-valued ops).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autorelay.errors import TypeCheckError, clip
from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr, Op
from autorelay.ir.types import Type


class OpPattern(enum.IntEnum):
    """How an op may fuse (Relay's numbering: lower is more fusable)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


class NotReady(Exception):
    """Raised by a type relation whose inputs are not yet known well enough."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

TypeRelation = Callable[[list[Type], Attrs], "Type | tuple[list[Type], Type]"]


@dataclass(frozen=True)
class OpDef:
    name: str
    arg_names: tuple[str, ...]
    type_rel: TypeRelation
    pattern: OpPattern = OpPattern.OPAQUE
    attrs: Mapping[str, Any] = field(default_factory=dict)  # name -> default (or REQUIRED)
    reference: Callable[..., Any] | None = None
    gradient: Callable[[Call, Expr], list[Expr]] | None = None
    compute: Callable[..., Any] | None = None
    normalize_attrs: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    effectful: bool = False  # never constant-folded or deduplicated
    doc: str = ""

    @property
    def num_args(self) -> int:
        return len(self.arg_names)

    def make_attrs(self, given: Mapping[str, Any] | None = None) -> Attrs:
        """Validate attribute names, fill defaults and normalise values."""
        given = dict(given or {})
        unknown = [k for k in given if k not in self.attrs]
        if unknown:
            known = ", ".join(self.attrs) or "none"
            raise TypeCheckError(
                f"{self.name}: unknown attribute(s) {', '.join(unknown)} (known: {known})"
            )
        full: dict[str, Any] = {}
        for k, default in self.attrs.items():
            if k in given:
                full[k] = _checked_kind(self.name, k, default, given[k])
            elif default is REQUIRED:
                raise TypeCheckError(f"{self.name}: missing required attribute {k!r}")
            else:
                full[k] = default
        if self.normalize_attrs is not None:
            try:
                full = self.normalize_attrs(full)
            except (TypeError, ValueError) as e:  # in Python's words, which name no attribute: show them
                shown = clip(", ".join(f"{k}={v!r}" for k, v in given.items()))
                raise TypeCheckError(f"{self.name}: cannot take {shown}: {e}") from e
        return Attrs(full)


def _checked_kind(op: str, name: str, default: Any, value: Any) -> Any:
    """`value` for an attribute whose default says its kind: a flag takes a bool (or 0/1), a number
    takes no string. Only these two kinds are certain from a default (an int default may stand for
    a list, a None default for anything), so other values pass to the op's own normalisation."""
    if isinstance(default, bool) and not (isinstance(value, bool | np.bool_)
                                          or (isinstance(value, int | np.integer) and value in (0, 1))):
        raise TypeCheckError(f"{op}: attribute {name} must be a bool, got {value!r}")
    if isinstance(default, int | float) and not isinstance(default, bool) and isinstance(value, str):
        raise TypeCheckError(f"{op}: attribute {name} must be a number, got {value!r}")
    return value


_REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.name in _REGISTRY:
        raise ValueError(f"operator {opdef.name} registered twice")
    _REGISTRY[opdef.name] = opdef
    return opdef


def get(name: str) -> OpDef:
    _ensure_loaded()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}") from None


def exists(name: str) -> bool:
    _ensure_loaded()
    return name in _REGISTRY


def all_ops() -> list[OpDef]:
    _ensure_loaded()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def _ensure_loaded() -> None:
    # Importing the package registers every family module.
    import autorelay.op  # noqa: F401


def call(name: str, *args: Expr, **attrs: Any) -> Call:
    """Build a call of a registered op with validated, defaulted attributes."""
    opdef = get(name)
    if len(args) != opdef.num_args:
        raise TypeCheckError(
            f"{name} takes {opdef.num_args} argument(s) ({', '.join(opdef.arg_names)}), got {len(args)}"
        )
    return Call(Op(name), tuple(args), opdef.make_attrs(attrs))


def rel_error(op: str, message: str) -> TypeCheckError:
    """A type-relation failure; raise it: `raise rel_error("nn.dense", "…")`."""
    return TypeCheckError(f"{op}: {message}")
