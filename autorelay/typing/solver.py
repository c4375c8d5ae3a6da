"""Deferred constraints: operator type relations and tuple projections, solved to a fixpoint.

Most typing rules are plain equalities and are unified on the spot. Two kinds of rule need to
*see* a type before they can say anything — an op's type relation (which computes a result shape
from argument shapes) and a tuple projection (which needs the tuple's arity). These become
constraints: each is attempted as soon as it is created (the common case in a dataflow graph,
where arguments are typed before their users) and, if its inputs are not known yet (`NotReady`),
queued and retried whenever unification has learned something new.

A relation that ran but still left holes in its arguments or result stays queued, because a
later, more precise run may refine or reject what the first run accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autorelay.errors import TypeCheckError
from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Node
from autorelay.ir.types import IncompleteType, TupleType, Type
from autorelay.op.registry import NotReady, OpDef
from autorelay.typing.unify import Unifier, UnifyError, contains_hole, show


def _located(node: Node, message: str, where: str) -> TypeCheckError:
    suffix = f" (in {where})" if where else ""
    return TypeCheckError(message + suffix, node.get_span())


@dataclass(eq=False)
class Constraint:
    """A rule that needs some types to be known before it can be checked."""

    node: Node
    where: str  # the enclosing global, for messages
    ran: bool = field(default=False, init=False)
    not_ready: str = field(default="", init=False)

    def attempt(self, u: Unifier) -> bool:
        """Check the rule; True when nothing is left to learn. Raise NotReady to be retried."""
        raise NotImplementedError

    def never_ready(self, u: Unifier) -> TypeCheckError:
        raise NotImplementedError


@dataclass(eq=False)
class OpRelation(Constraint):
    """`ret = op(args)` as judged by the OpDef's type relation."""

    opdef: OpDef = None  # type: ignore[assignment]
    attrs: Attrs = None  # type: ignore[assignment]
    args: list[Type] = field(default_factory=list)
    ret: Type = None  # type: ignore[assignment]

    def attempt(self, u: Unifier) -> bool:
        name = self.opdef.name
        arg_types = [u.resolve(t) for t in self.args]
        try:
            out = self.opdef.type_rel(arg_types, self.attrs)
        except NotReady as e:
            self.not_ready = str(e)
            raise
        except TypeCheckError as e:
            raise _located(self.node, e.message, self.where) from e
        except Exception as e:  # a relation crashing on odd input is still the program's error
            shown = ", ".join(show(t) for t in arg_types)
            raise _located(
                self.node, f"{name}: type relation failed for argument types ({shown}): {e}", self.where
            ) from e
        self.ran = True
        if isinstance(out, tuple):
            refined, result = out
            if len(refined) != len(self.args):
                raise _located(
                    self.node,
                    f"{name}: type relation returned {len(refined)} argument types for "
                    f"{len(self.args)} arguments",
                    self.where,
                )
            for i, (actual, want) in enumerate(zip(self.args, refined)):
                try:
                    u.unify(actual, want)
                except UnifyError as e:
                    arg = self.opdef.arg_names[i] if i < len(self.opdef.arg_names) else str(i)
                    raise _located(
                        self.node,
                        f"{name}: argument {arg} has type {show(u.resolve(actual))} but the op "
                        f"requires {show(u.resolve(want))} ({e.detail})",
                        self.where,
                    ) from None
        else:
            result = out
        try:
            u.unify(self.ret, result)
        except UnifyError as e:
            raise _located(
                self.node,
                f"{name}: result type {show(u.resolve(result))} conflicts with the type expected "
                f"here, {show(u.resolve(self.ret))} ({e.detail})",
                self.where,
            ) from None
        return not any(contains_hole(u.resolve(t)) for t in [*self.args, self.ret])

    def never_ready(self, u: Unifier) -> TypeCheckError:
        shown = ", ".join(show(u.resolve(t)) for t in self.args)
        reason = f": {self.not_ready}" if self.not_ready else ""
        return _located(
            self.node,
            f"{self.opdef.name}: cannot infer the result type, argument types not known well enough "
            f"({shown}){reason}; annotate the arguments",
            self.where,
        )


@dataclass(eq=False)
class Projection(Constraint):
    """`ret = tuple.index`: needs the tuple's arity."""

    tuple_type: Type = None  # type: ignore[assignment]
    index: int = 0
    ret: Type = None  # type: ignore[assignment]

    def attempt(self, u: Unifier) -> bool:
        t = u.resolve(self.tuple_type)
        if isinstance(t, TupleType):
            if not 0 <= self.index < len(t.fields):
                raise _located(
                    self.node,
                    f"tuple projection .{self.index} out of range for tuple type {show(t)} "
                    f"of {len(t.fields)} field(s)",
                    self.where,
                )
            try:
                u.unify(self.ret, t.fields[self.index])
            except UnifyError as e:
                raise _located(
                    self.node,
                    f"tuple projection .{self.index}: field type {show(u.resolve(t.fields[self.index]))} "
                    f"conflicts with {show(u.resolve(self.ret))} ({e.detail})",
                    self.where,
                ) from None
            self.ran = True
            return True
        if isinstance(t, IncompleteType):
            raise NotReady("tuple type unknown")
        raise _located(
            self.node, f"tuple projection .{self.index} of a value of non-tuple type {show(t)}", self.where
        )

    def never_ready(self, u: Unifier) -> TypeCheckError:
        return _located(
            self.node,
            f"tuple projection .{self.index}: cannot infer the type of the projected value; annotate it",
            self.where,
        )


class Solver:
    """Owns the unifier and the queue of deferred constraints."""

    def __init__(self) -> None:
        self.unifier = Unifier()
        self.pending: list[Constraint] = []

    def add(self, c: Constraint) -> None:
        """Try `c` now; queue it if it is not ready or may learn more later."""
        try:
            done = c.attempt(self.unifier)
        except NotReady:
            done = False
        if not done:
            self.pending.append(c)

    def solve(self) -> None:
        """Retry queued constraints until a whole pass binds nothing new."""
        while self.pending:
            before = self.unifier.version
            still: list[Constraint] = []
            for c in self.pending:
                try:
                    done = c.attempt(self.unifier)
                except NotReady:
                    done = False
                if not done:
                    still.append(c)
            progressed = self.unifier.version != before or len(still) != len(self.pending)
            self.pending = still
            if not progressed:
                return

    def check_all_ran(self) -> None:
        """After solving: a constraint that never ran names its op or projection as unsolvable."""
        for c in self.pending:
            if not c.ran:
                raise c.never_ready(self.unifier)
