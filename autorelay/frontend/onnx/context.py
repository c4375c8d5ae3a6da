"""The state shared by the converters: typed IR construction, constant folding and node views.

Why types during import: many ONNX ops are only expressible in the IR once shapes are known
(`Flatten`, `Shape`, `Reshape` with `-1`, auto padding, `MatMul` broadcasting), so every call the
importer builds is typed immediately with the op's own type relation. That is the same rule
`infer_types` applies later, so the two cannot disagree, and a shape contradiction surfaces at the
node that causes it.

Why folding: exporters compute shapes with `Shape -> Gather -> Concat -> Reshape` chains. A call
whose arguments are all constants is evaluated with the op's NumPy reference (the project's
oracle), so such chains collapse to constants and the ops that need static values get them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autorelay.errors import TypeCheckError
from autorelay.frontend.onnx.errors import OnnxNodeError, OnnxStaticValueError
from autorelay.ir.expr import Constant, Expr, Span, Tuple, TupleGetItem, Var
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.op.registry import NotReady
from autorelay.op.registry import call as op_call
from autorelay.op.registry import get as get_op

# ONNX TensorProto element types the IR can hold (others: bfloat16, float8, int4, string, complex …)
ONNX_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}


@dataclass
class NodeView:
    """One ONNX node as the converters see it: converted inputs, decoded attributes, its opset."""

    index: int
    name: str
    op_type: str
    inputs: list[Expr | None]
    input_names: list[str]
    attrs: dict[str, Any]
    num_outputs: int
    opset: int
    output_names: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"node #{self.index} {self.name!r} ({self.op_type})"

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def input(self, i: int) -> Expr | None:
        """Input `i`, or None when it is absent (past the end or given as the empty name)."""
        return self.inputs[i] if i < len(self.inputs) else None

    def fail(self, message: str) -> OnnxNodeError:
        return OnnxNodeError(self.where, message)


class GraphBuilder:
    """Builds typed, constant-folded IR for one graph; converters call `call`, `value`, `shape`…"""

    def __init__(self) -> None:
        self._types: dict[int, tuple[Expr, Type]] = {}
        self.node: NodeView | None = None  # the node being converted (for errors and spans)
        self.init_values: dict[int, tuple[Var, np.ndarray]] = {}  # initializer Var -> its value
        self.graph_inputs: set[str] = set()  # names of the graph inputs that are parameters
        self.empty_optionals: set[int] = set()  # ids of the markers of empty ONNX optionals
        # converts a subgraph (an If branch) in the current scope; set by the importer
        self.subgraph_converter: Callable[[Any, dict[str, Expr]], list[Expr]] | None = None

    # ---- errors -----------------------------------------------------------------------------

    def fail(self, message: str) -> OnnxNodeError:
        return OnnxNodeError(self.node.where if self.node else "graph", message)

    # ---- types ------------------------------------------------------------------------------

    def type_of(self, e: Expr) -> Type:
        if isinstance(e, Constant):
            return e.type
        if isinstance(e, Var):
            return e.type_annotation
        entry = self._types.get(id(e))
        if entry is None:
            raise self.fail(f"internal: no type recorded for {e!r}")
        return entry[1]

    def built(self) -> frozenset[int]:
        """The ids of the expressions built so far (a Loop's enclosing values, taken before its
        body is converted)."""
        return frozenset(self._types)

    def tensor_type(self, e: Expr) -> TensorType:
        t = self.type_of(e)
        if not isinstance(t, TensorType):
            raise self.fail(f"expected a tensor, got {t}")
        return t

    def shape(self, e: Expr) -> tuple:
        return self.tensor_type(e).shape

    def dtype(self, e: Expr) -> str:
        return self.tensor_type(e).dtype

    def ndim(self, e: Expr) -> int:
        return len(self.shape(e))

    def static_shape(self, e: Expr, what: str = "input") -> tuple[int, ...]:
        shape = self.shape(e)
        if not all(isinstance(d, int) for d in shape):
            raise self.fail(
                f"{what} has dynamic shape {tuple(str(d) for d in shape)}; this op needs it "
                "static (pass shape={name: …} to from_onnx)"
            )
        return shape  # type: ignore[return-value]

    def _record(self, e: Expr, t: Type) -> Expr:
        self._types[id(e)] = (e, t)
        return e

    def record(self, e: Expr, t: Type) -> Expr:
        """Note the type of an expression a converter built itself (an `if`)."""
        return self._record(e, t)

    def subgraph(self, graph: Any, bindings: dict[str, Expr] | None = None) -> list[Expr]:
        """The outputs of an ONNX subgraph converted where it stands: it sees the enclosing values,
        and `bindings` give its own inputs (a Loop body's iteration number, condition, state)."""
        if self.subgraph_converter is None:
            raise self.fail("subgraphs are not supported here")
        node = self.node
        try:
            return self.subgraph_converter(graph, dict(bindings or {}))
        finally:
            self.node = node

    # ---- construction -----------------------------------------------------------------------

    def _span(self) -> Span | None:
        n = self.node
        return Span(f"onnx node {n.name or n.op_type!r} ({n.op_type})", n.index + 1, 1) if n else None

    def call(self, op: str, *args: Expr, **attrs: Any) -> Expr:
        """A call of a registered op, typed now, folded to a constant when every argument is one."""
        try:
            c = op_call(op, *args, **attrs)
            opdef = get_op(op)
            rel = opdef.type_rel([self.type_of(a) for a in args], c.attrs)
        except TypeCheckError as err:
            raise self.fail(err.message) from None
        except NotReady as err:
            raise self.fail(f"cannot infer the type of {op}: {err}") from None
        out_t = rel[1] if isinstance(rel, tuple) else rel
        if opdef.reference is not None and not opdef.effectful and all(_is_const(a) for a in args):
            value = opdef.reference(c.attrs, *[_const_value(a) for a in args])
            if isinstance(out_t, TupleType):
                return self.tuple([self.const(np.asarray(v), t.dtype) for v, t in zip(value, out_t.fields)])
            return self.const(np.asarray(value), out_t.dtype)
        c.with_span(self._span())
        return self._record(c, out_t)

    def tuple(self, fields: Sequence[Expr]) -> Expr:
        t = Tuple(tuple(fields))
        return self._record(t, TupleType(tuple(self.type_of(f) for f in fields)))

    def item(self, tup: Expr, i: int) -> Expr:
        if isinstance(tup, Tuple):
            return tup.fields[i]
        t = self.type_of(tup)
        assert isinstance(t, TupleType)
        return self._record(TupleGetItem(tup, i), t.fields[i])

    def const(self, value: Any, dtype: str | None = None) -> Constant:
        arr = np.asarray(value)
        if dtype is not None:
            arr = arr.astype(dtype)
        elif arr.dtype == np.float64 and not isinstance(value, np.ndarray):
            arr = arr.astype("float32")
        return Constant(arr)

    def scalar(self, value: float, like: Expr) -> Constant:
        """A scalar constant with the dtype of `like` (binary ops do not promote dtypes)."""
        return self.const(np.array(value), self.dtype(like))

    # ---- static values ----------------------------------------------------------------------

    def value_or_none(self, e: Expr | None) -> np.ndarray | None:
        if e is None:
            return None
        if isinstance(e, Constant):
            return e.data
        if isinstance(e, Var) and id(e) in self.init_values:
            return self.init_values[id(e)][1]
        return None

    def value(self, e: Expr | None, what: str) -> np.ndarray:
        """The import-time value of an input that must be static (a shape, axes, pads, scales)."""
        v = self.value_or_none(e)
        if v is not None:
            return v
        node = self.node
        name = ""
        if node is not None and e is not None:
            for n, x in zip(node.input_names, node.inputs):
                if x is e:
                    name = n
                    break
        if name in self.graph_inputs:
            hint = f"it is a graph input: bind it with from_onnx(..., constants={{{name!r}: value}})"
        else:
            hint = "it is computed at run time (from a graph input or a dynamic shape)"
        raise OnnxStaticValueError(
            node.where if node else "graph",
            f"{what} (input {name!r}) must be known at import time (a constant or initializer); {hint}",
            name,
        )

    def ints(self, e: Expr | None, what: str) -> list[int]:
        return [int(v) for v in np.asarray(self.value(e, what)).reshape(-1)]


def _is_const(e: Expr) -> bool:
    return isinstance(e, Constant) or (
        isinstance(e, Tuple) and all(isinstance(f, Constant) for f in e.fields)
    )


def _const_value(e: Expr) -> Any:
    if isinstance(e, Constant):
        return e.data
    return [f.data for f in e.fields]  # type: ignore[attr-defined]


def normalize_axis(g: GraphBuilder, axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise g.fail(f"{what}={axis} is out of range for rank {ndim}")
    return axis % ndim if ndim else 0


def extent_scalar(g: GraphBuilder, x: Expr, axis: int) -> Expr:
    """Extent `axis` of `x` as an int64 scalar: a constant where static, else read at run time."""
    d = g.shape(x)[axis]
    if isinstance(d, int):
        return g.const(np.array(d, "int64"))
    return g.call("reshape", g.call("strided_slice", g.call("shape_of", x), begin=(axis,), end=(axis + 1,)),
                  newshape=())


def wrap_negative(g: GraphBuilder, ind: Expr, extents: Expr | int | Sequence[int]) -> Expr:
    """Run-time indices with ONNX's negative ones (counted from the end) made non-negative:
    `ind + extent` where `ind < 0`. `extents` broadcasts against `ind`: one extent, or one per
    entry of an index tuple's last axis; static ints or a run-time vector."""
    dtype = g.dtype(ind)
    ext = extents if isinstance(extents, Expr) else g.const(np.array(extents, dtype))
    negative = g.call("less", ind, g.const(np.array(0, dtype)))
    return g.call("where", negative, g.call("add", ind, ext), ind)


def tuple_offsets(g: GraphBuilder, ind: Expr, extents: Sequence[Any], wrap_by: Expr | None = None) -> Expr:
    """The row-major offsets, into axes of `extents`, of the index tuples along `ind`'s last axis
    (GatherND's and ScatterND's indexing), negative entries wrapped first by `extents` or, when
    some are dynamic, by the run-time vector `wrap_by`. Every extent but the first must be static."""
    ind = wrap_negative(g, g.call("cast", ind, dtype="int64"), extents if wrap_by is None else wrap_by)
    strides = [int(np.prod(extents[i + 1 :])) for i in range(len(extents))]
    weighted = g.call("multiply", ind, g.const(np.array(strides, "int64")))
    return g.call("sum", weighted, axis=(-1,), keepdims=False)


Converter = Callable[[GraphBuilder, NodeView], "Expr | list[Expr | None]"]


def registrar(table: dict[str, Converter]) -> Callable[..., Callable[[Converter], Converter]]:
    """A decorator registering a converter in `table` under one or more ONNX op types."""

    def reg(*names: str) -> Callable[[Converter], Converter]:
        def deco(fn: Converter) -> Converter:
            for n in names:
                table[n] = fn
            return fn

        return deco

    return reg


def required_input(node: NodeView, i: int = 0) -> Expr:
    """Input `i` of `node`, which the op requires."""
    e = node.input(i)
    if e is None:
        raise node.fail(f"input {i} is required")
    return e

