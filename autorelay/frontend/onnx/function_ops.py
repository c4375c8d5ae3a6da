"""ONNX operators that ONNX defines as functions of other operators, expanded where AutoRelay has no
converter of its own (LinearAttention, CausalConvWithState): the node is replaced by its function
body, whose nodes are converted in its place, as ONNX Runtime runs a function op it has no kernel
for.

An op's schema holds its body for the opsets where the definition changed; the body used is the
newest not past the model's opset. A context-dependent body is generated for this node: its
attributes and its inputs' types (known here: the inputs were converted first) choose the
expansion (LinearAttention's update rule, a missing optional input). The body's values get names
prefixed by the node's first output, so two expansions never collide; its attribute references
take the node's attributes, and an attribute the node leaves unset is left to the inner op's
default. A body node's subgraph (LinearAttention's Scan) keeps the names it defines and reads the
body's values by their new names.
"""

from __future__ import annotations

from typing import Any

from autorelay.frontend.onnx.context import ONNX_DTYPES
from autorelay.ir.types import TensorType, TupleType, Type

_ONNX_ELEM = {dtype: code for code, dtype in ONNX_DTYPES.items()}


def _schema(onnx: Any, node: Any, opset: int) -> Any | None:
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return None


def expandable(onnx: Any, node: Any, opset: int, converted: set[str] | frozenset[str]) -> bool:
    """Whether ONNX defines `node`'s op (at `opset`) as a function of other ops that is not known to
    use an op without a converter: its body, generated for this node with float inputs where it
    depends on the node (the types are not known before conversion; a generator that needs them
    leaves the question to the conversion, which names any op it lacks)."""
    schema = _schema(onnx, node, opset)
    if schema is None or not (schema.has_function or schema.has_context_dependent_function):
        return False
    floats = [onnx.helper.make_tensor_type_proto(1, None) if name else None for name in node.input]
    try:
        body = function_body(onnx, node, opset, floats)
    except Exception:  # a generator that needs the real types: nothing known against the op
        return True
    return {n.op_type for n in body.node} <= set(converted)


def type_proto(onnx: Any, t: Type) -> Any:
    """The ONNX TypeProto of a converted value's type (a tuple is a sequence of its first field's
    type: sequences are held as tuples, `converters_sequence`)."""
    if isinstance(t, TupleType):
        elem = type_proto(onnx, t.fields[0]) if t.fields else onnx.helper.make_tensor_type_proto(1, None)
        return onnx.helper.make_sequence_type_proto(elem)
    assert isinstance(t, TensorType)
    dims = [d if isinstance(d, int) else str(d) for d in t.shape]
    return onnx.helper.make_tensor_type_proto(_ONNX_ELEM[t.dtype], dims)


def function_body(onnx: Any, node: Any, opset: int, input_types: list[Any]) -> Any:
    """`node`'s op as a FunctionProto: its schema's body for `opset`, or the body generated for
    this node and these input TypeProtos (None for an absent optional input)."""
    schema = _schema(onnx, node, opset)
    fn = onnx.FunctionProto()
    if schema.has_function:
        version = max(v for v in schema.function_opset_versions if v <= opset)
        fn.ParseFromString(schema.get_function_with_opset_version(version))
        return fn
    version = max(v for v in schema.context_dependent_function_opset_versions if v <= opset)
    types = [t.SerializeToString() if t is not None else onnx.TypeProto().SerializeToString()
             for t in input_types]
    fn.ParseFromString(schema.get_context_dependent_function_with_opset_version(
        version, node.SerializeToString(), types))
    return fn


def expand(onnx: Any, node: Any, fn: Any) -> list[Any]:
    """The nodes of `fn`'s body wired into `node`'s place: its inputs and outputs renamed to the
    node's, its own values prefixed, its attribute references resolved (in subgraphs too)."""
    names = {inner: outer for inner, outer in zip(fn.input, node.input)}
    names.update({inner: outer for inner, outer in zip(fn.output, node.output) if outer})
    prefix = f"{node.output[0]}/{node.op_type}/"
    given = {a.name: a for a in node.attribute}

    def rename(name: str) -> str:
        return names.get(name, prefix + name if name else "")

    body = [_rewired(onnx, inner, rename, rename, given) for inner in fn.node]
    for out, inner in zip(body, fn.node):
        out.name = prefix + (inner.name or inner.op_type)
    return body


def _rewired(onnx: Any, inner: Any, rename_in: Any, rename_out: Any, given: dict[str, Any]) -> Any:
    """A copy of body node `inner` with its inputs and outputs renamed and its attribute references
    resolved from `given` (dropped where the node leaves them unset); a subgraph attribute keeps
    the names it defines and renames those it reads from outside."""
    out = onnx.NodeProto()
    out.CopyFrom(inner)
    out.input[:] = [rename_in(n) for n in inner.input]
    out.output[:] = [rename_out(n) for n in inner.output]
    del out.attribute[:]
    for a in inner.attribute:
        if a.ref_attr_name:
            if a.ref_attr_name in given:
                resolved = out.attribute.add()
                resolved.CopyFrom(given[a.ref_attr_name])
                resolved.name = a.name
            continue
        copy = out.attribute.add()
        copy.CopyFrom(a)
        if a.HasField("g"):
            copy.g.CopyFrom(_rewired_graph(onnx, a.g, rename_in, given))
        for k, sub in enumerate(a.graphs):
            copy.graphs[k].CopyFrom(_rewired_graph(onnx, sub, rename_in, given))
    return out


def _rewired_graph(onnx: Any, graph: Any, rename_outer: Any, given: dict[str, Any]) -> Any:
    """Subgraph `graph` of a body node: names it defines (inputs, initializers, node outputs) stay,
    names it reads from the body are renamed as the body's."""
    local = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    local |= {o for n in graph.node for o in n.output}

    def rename(name: str) -> str:
        return name if not name or name in local else rename_outer(name)

    out = onnx.GraphProto()
    out.CopyFrom(graph)
    del out.node[:]
    out.node.extend(_rewired(onnx, n, rename, lambda name: name, given) for n in graph.node)
    for vi in out.output:
        vi.name = rename(vi.name)
    return out


def body_opset(fn: Any, default: int) -> int:
    """The default-domain opset `fn`'s body is written against."""
    return next((o.version for o in fn.opset_import if o.domain in ("", "ai.onnx")), default)


def expandable_ops(onnx: Any, converted: set[str] | frozenset[str]) -> list[str]:
    """The default-domain ops without a converter that the import expands (`expandable` for a node
    without attributes), for `coverage`."""
    out = []
    for schema in onnx.defs.get_all_schemas():
        if schema.domain in ("", "ai.onnx") and schema.name not in converted:
            node = onnx.helper.make_node(schema.name, [f"in{k}" for k in range(len(schema.inputs))], ["out"])
            if expandable(onnx, node, schema.since_version, converted):
                out.append(schema.name)
    return sorted(out)
