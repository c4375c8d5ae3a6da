"""`from_onnx`: an ONNX model (file path, bytes or ModelProto) to an IRModule plus its parameters.

The walk is the usual one — graph inputs and initializers become values, nodes are converted in
their (topological) order, graph outputs form the body of `@main` — with three choices worth
knowing:

* Float initializers become parameters of `@main` (after the graph inputs, in initializer order,
  the values in `params`), as the model zoo does, so passes can bind and fold them. Integer and
  bool initializers (shapes, axes, indices, quantised tensors) are embedded as constants, because
  the ops that read them need their values at import time. Initializers the converted graph never
  reads as tensors are not parameters.
* Every op type without a converter is collected before any conversion starts and reported in one
  error (`UnsupportedOnnxOpsError`), with the names of the nodes that use it.
* Everything else that goes wrong is a one-line `OnnxImportError` naming the node.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autorelay.errors import TypeCheckError
from autorelay.frontend.onnx import qdq
from autorelay.frontend.onnx.context import GraphBuilder, NodeView
from autorelay.frontend.onnx.converters import CONVERTERS, SUPPORTED_OPS
from autorelay.frontend.onnx.errors import (
    OnnxImportError,
    OnnxModelError,
    OnnxNodeError,
    UnsupportedOnnxOpsError,
)
from autorelay.frontend.onnx.function_ops import (
    body_opset,
    expand,
    expandable,
    function_body,
    type_proto,
)
from autorelay.frontend.onnx.loader import (
    DEFAULT_DOMAINS,
    NameTable,
    default_opset,
    input_type,
    is_sequence_input,
    load_model,
    require_onnx,
    sequence_input_types,
    tensor_value,
)
from autorelay.ir.expr import Expr, Function, Var
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType
from autorelay.ir.visitor import free_vars


def from_onnx(
    model: Any,
    shape: Mapping[str, Sequence[int]] | None = None,
    dtype: str = "float32",
    *,
    constants: Mapping[str, np.ndarray] | None = None,
    base_dir: str | os.PathLike | None = None,
    fold_qdq: bool = True,
) -> tuple[IRModule, dict[str, np.ndarray]]:
    """Import an ONNX model.

    `model`: a path, the serialised bytes, or an `onnx.ModelProto`. Weights stored in external data
    files are read from the model's folder (or `base_dir` for a ModelProto / bytes).
    `shape`: graph input name -> shape, overriding dynamic (or any) dimensions; for an input that
    is a sequence of tensors, the list of their shapes, which fixes its length: it becomes one
    parameter per tensor (`converters_sequence`).
    `dtype`: element type of graph inputs that declare none.
    `constants`: graph input name -> value, to embed inputs that ops need statically (a Reshape
    target given as an input); those inputs are then not parameters of `@main`.
    `fold_qdq`: fold QDQ-format chains (DequantizeLinear -> Conv/MatMul/Gemm/Add/Concat ->
    QuantizeLinear) into quantised operators so that they run on integer kernels (`qdq.fold_qdq`);
    False keeps them as float ops between qnn.dequantize and qnn.quantize.

    Returns `(mod, params)`: `@main`'s parameters are the graph inputs, then one per float
    initializer, whose values are in `params`.
    """
    onnx = require_onnx()
    proto, folder = load_model(onnx, model, base_dir)
    opset = default_opset(proto)
    if proto.functions:  # model-local functions (some exporters emit one per module): inline them
        from onnx import inliner

        try:
            proto = inliner.inline_local_functions(proto)
        except Exception as err:
            raise OnnxModelError(f"cannot inline the model's local functions: {err}") from None
    if fold_qdq:
        proto = qdq.fold_qdq(onnx, proto)
    graph = proto.graph
    g = GraphBuilder()
    values: dict[str, Expr] = {}
    params: dict[str, np.ndarray] = {}
    names = NameTable()

    init_names = {t.name for t in graph.initializer}
    init_vars: list[Var] = []
    for t in graph.initializer:
        arr = tensor_value(onnx, t, folder)
        if arr.dtype.kind == "f":
            var = Var(names.fresh(t.name), TensorType(tuple(int(d) for d in arr.shape), str(arr.dtype)))
            g.init_values[id(var)] = (var, arr)
            init_vars.append(var)
            values[t.name] = var
        else:
            values[t.name] = g.const(arr)

    constants = dict(constants or {})
    shape = dict(shape or {})
    input_vars: list[Var] = []
    for vi in graph.input:
        if vi.name in init_names:
            continue  # IR < 4 also lists initializers as inputs
        if vi.name in constants:
            values[vi.name] = g.const(np.asarray(constants[vi.name]))
            continue
        if is_sequence_input(vi):  # one parameter per tensor, in order
            elems = [Var(names.fresh(f"{vi.name}_{k}"), t)
                     for k, t in enumerate(sequence_input_types(vi, shape.get(vi.name), dtype))]
            values[vi.name] = g.tuple(elems)
            input_vars.extend(elems)
            continue
        var = Var(names.fresh(vi.name), input_type(vi, shape.get(vi.name), dtype))
        values[vi.name] = var
        input_vars.append(var)
        g.graph_inputs.add(vi.name)
    unknown = set(shape) - {vi.name for vi in graph.input}
    if unknown:
        raise OnnxModelError(
            f"shape= names {sorted(unknown)} that are not graph inputs ({[vi.name for vi in graph.input]})"
        )

    _check_supported(onnx, graph, opset)
    declared = {vi.name: vi for vi in list(graph.value_info) + list(graph.output)}

    def convert_subgraph(sub: Any, bindings: dict[str, Expr]) -> list[Expr]:
        """An If branch or Loop body: its own initializers as constants, its inputs as `bindings`
        give them, its nodes in a scope that sees every value converted so far, its outputs."""
        unbound = [vi.name for vi in sub.input if vi.name not in bindings]
        if unbound:
            raise OnnxModelError(f"subgraph {sub.name!r}: inputs {unbound} have no value")
        scope = {**values, **bindings}
        for t in sub.initializer:
            scope[t.name] = g.const(tensor_value(onnx, t, folder))
        inner = {vi.name: vi for vi in list(sub.value_info) + list(sub.output)}
        for k, n in enumerate(sub.node):
            _convert_node(onnx, g, n, k, opset, scope, inner, folder)
        missing = [vi.name for vi in sub.output if vi.name not in scope]
        if missing:
            raise OnnxModelError(f"subgraph {sub.name!r}: outputs {missing} are not produced")
        return [scope[vi.name] for vi in sub.output]

    g.subgraph_converter = convert_subgraph
    for index, node in enumerate(graph.node):
        _convert_node(onnx, g, node, index, opset, values, declared, folder)

    outputs = []
    for vi in graph.output:
        if vi.name not in values:
            raise OnnxModelError(
                f"graph output {vi.name!r} is not produced by any node, input or initializer"
            )
        outputs.append(values[vi.name])
    if not outputs:
        raise OnnxModelError("the graph has no outputs")
    body = outputs[0] if len(outputs) == 1 else g.tuple(outputs)
    used = set(free_vars(body))
    weights = [v for v in init_vars if v in used]
    for v in weights:
        params[v.name_hint] = g.init_values[id(v)][1]
    return IRModule.from_expr(Function(tuple(input_vars) + tuple(weights), body)), params


# ---- the node walk ------------------------------------------------------------------------------


def converter_key(node: Any) -> str:
    """The converter table's key: the op type, prefixed by its domain outside the default one
    (ONNX Runtime's contrib ops: `com.microsoft.QLinearAdd`)."""
    return node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"


def _check_supported(onnx: Any, graph: Any, opset: int, missing: dict[str, list[str]] | None = None) -> None:
    """Every op without a converter (or a function body to expand, `function_ops`), in this graph
    and its subgraphs, reported in one error."""
    top = missing is None
    missing = {} if missing is None else missing
    for index, node in enumerate(graph.node):
        key = converter_key(node)
        if key not in CONVERTERS and not expandable(onnx, node, opset, SUPPORTED_OPS):
            missing.setdefault(key, []).append(f"{node.name or '<unnamed>'} [#{index}]")
        for a in node.attribute:
            if a.HasField("g"):
                _check_supported(onnx, a.g, opset, missing)
    if top and missing:
        raise UnsupportedOnnxOpsError(missing)


def _convert_node(
    onnx: Any,
    g: GraphBuilder,
    node: Any,
    index: int,
    opset: int,
    values: dict[str, Expr],
    declared: dict[str, Any],
    folder: str | None,
) -> None:
    where = f"node #{index} {node.name!r} ({node.op_type})"
    inputs = _node_inputs(node, values, where)
    if converter_key(node) not in CONVERTERS:  # an op ONNX defines as a function: convert its body
        _convert_function_op(onnx, g, node, index, opset, inputs, values, declared, folder, where)
        return
    attrs = {a.name: _attr_value(onnx, a, folder, where) for a in node.attribute}
    view = NodeView(
        index,
        node.name,
        node.op_type,
        inputs,
        list(node.input),
        attrs,
        len(node.output),
        opset,
        list(node.output),
    )
    g.node = view
    try:
        result = CONVERTERS[converter_key(node)](g, view)
    except OnnxImportError:
        raise
    except TypeCheckError as err:  # an op refused the converter's attributes or operands: say at which node
        raise OnnxNodeError(where, err.message) from None
    except (ValueError, TypeError, IndexError, KeyError) as err:
        raise OnnxNodeError(where, f"{type(err).__name__}: {err}") from None
    finally:
        g.node = None
    outs = list(result) if isinstance(result, (list, tuple)) else [result]
    for i, name in enumerate(node.output):
        if not name:
            continue
        if i >= len(outs) or outs[i] is None:
            raise OnnxNodeError(where, f"output {i} ({name!r}) is not supported by this converter")
        g.node = view
        _check_declared(g, name, outs[i], declared.get(name), where)
        g.node = None
        values[name] = outs[i]


def _node_inputs(node: Any, values: dict[str, Expr], where: str) -> list[Expr | None]:
    """`node`'s converted inputs, None for an absent optional one (the empty name)."""
    inputs: list[Expr | None] = []
    for name in node.input:
        if not name:
            inputs.append(None)
        elif name not in values:
            raise OnnxNodeError(
                where,
                f"input {name!r} is not produced by an earlier node, a graph input or "
                "an initializer (graph not in topological order, or the file is truncated)",
            )
        else:
            inputs.append(values[name])
    return inputs


def _convert_function_op(onnx: Any, g: GraphBuilder, node: Any, index: int, opset: int,
                         inputs: list[Expr | None], values: dict[str, Expr], declared: dict[str, Any],
                         folder: str | None, where: str) -> None:
    """`node` (its `inputs` converted) replaced by its ONNX function body (`function_ops`), whose
    nodes convert in its place."""
    types = [type_proto(onnx, g.type_of(e)) if e is not None else None for e in inputs]
    fn = function_body(onnx, node, opset, types)
    body = expand(onnx, node, fn)
    unknown = sorted({converter_key(n) for n in body} - set(CONVERTERS))
    if unknown:
        raise OnnxNodeError(where, f"its ONNX function body uses ops without a converter: {unknown}")
    inner = body_opset(fn, opset)
    for n in body:
        _convert_node(onnx, g, n, index, inner, values, declared, folder)
    for name in node.output:
        if name and name not in values:
            raise OnnxNodeError(where, f"its function body does not produce output {name!r}")


def _check_declared(g: GraphBuilder, name: str, e: Expr, vi: Any, where: str) -> None:
    """A static extent the model declares for a value should match the one the import computed.

    When it does not, the import warns (naming the node and both shapes) and keeps its own: the
    computed shape follows from the op's type relation, and declared shapes are annotations that
    exporters sometimes get wrong (PyTorch's `scatter_reduce` export declares the flattened shape
    of a guard branch it does not take). ONNX Runtime runs such models too, with a warning."""
    if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return
    got = g.shape(e)
    dims = vi.type.tensor_type.shape.dim
    want = tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in dims)
    if len(want) != len(got) or any(
        w is not None and isinstance(h, int) and w != h for w, h in zip(want, got)
    ):
        shown = tuple("?" if w is None else w for w in want)
        computed = tuple(str(d) if not isinstance(d, int) else d for d in got)
        warnings.warn(f"{where}: output {name!r} is declared with shape {shown} but the node produces "
                      f"{computed}; the import keeps {computed}", stacklevel=2)


def _attr_value(onnx: Any, a: Any, folder: str | None, where: str) -> Any:
    A = onnx.AttributeProto
    if a.type == A.FLOAT:
        return float(a.f)
    if a.type == A.INT:
        return int(a.i)
    if a.type == A.STRING:
        return a.s.decode("utf-8")
    if a.type == A.FLOATS:
        return [float(x) for x in a.floats]
    if a.type == A.INTS:
        return [int(x) for x in a.ints]
    if a.type == A.STRINGS:
        return [s.decode("utf-8") for s in a.strings]
    if a.type == A.TYPE_PROTO:
        return a.tp  # a type (Optional's element type): read by the converter that needs it
    if a.type == A.GRAPH:
        return a.g  # a subgraph: the converter converts it in its scope (GraphBuilder.subgraph)
    if a.type == A.TENSOR:
        try:
            return tensor_value(onnx, a.t, folder)
        except OnnxModelError as err:
            raise OnnxNodeError(where, f"attribute {a.name!r}: {err}") from None
    raise OnnxNodeError(
        where,
        f"attribute {a.name!r} has a type ({A.AttributeType.Name(a.type)}) the "
        "importer does not read (sparse tensors and lists of graphs are unsupported)",
    )
