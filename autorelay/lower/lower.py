"""Fused primitive function -> one tensor compute DAG.

`lower_primitive(fn)` walks the primitive function's body in dependency order and chains each op's
`OpDef.compute` (see `autorelay.op.registry`): parameters become placeholders `p0, p1, …`, tensor
constants (weights FuseOps left inside the group) become placeholders `c0, c1, …` after the
parameters, and 1-element constants become inline scalar stages. Injective stages that are not
outputs are then inlined into their consumers, except padding stages, which a convolution
template may choose to compute separately ("root" padding), and the stage a GEMM reads as its A
operand, which the dense template computes once when several column blocks read it. The result
is a `ComputeDef`; `lower(fn)` also says where each kernel input comes from (`LoweredFunction.sources`).
Boolean inputs and outputs are `bool` buffers; the LLVM backend stores them as one byte each
(NumPy's layout), so kernels take NumPy bool arrays as they are.

An op with no compute, or whose compute cannot handle the inputs (`Unsupported`), makes the
whole function a fallback: `lower` raises `NoCompute` naming the op and why, and the build runs the
function through the ops' NumPy references instead (reported, never hidden).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.ir.visitor import post_order
from autorelay.op import registry
from autorelay.op.te_compute import TE_DTYPES, Unsupported
from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.nn import GEMM_TAGS
from autorelay.te.tensor import ComputeDef, Tensor, topo_order
from autorelay.utils.deep import deep

KEEP_TAGS = ("pad", "keep", "winograd_input")  # stages a schedule may want to compute on their own


class NoCompute(Exception):
    """A primitive function that cannot be lowered to a compute (the build falls back)."""

    def __init__(self, op: str, reason: str) -> None:
        self.op, self.reason = op, reason
        super().__init__(f"{op}: {reason}")


@dataclass(frozen=True)
class InputSource:
    """Where a kernel input comes from: the function's parameter `index`, or a constant `value`."""

    kind: str  # "param" | "const"
    index: int = -1
    value: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class LoweredFunction:
    cdef: ComputeDef
    sources: tuple[InputSource, ...]  # one per cdef input
    anchor: str  # the op that names the workload family


def tensor_type(t: Type | None, what: str) -> TensorType:
    if not isinstance(t, TensorType) or not t.is_static:
        raise NoCompute(what, f"needs a static tensor type, got {t}")
    if any(d == 0 for d in t.concrete_shape):
        raise NoCompute(what, f"has an empty shape {t.concrete_shape}")
    return t


def _type_of(e: Expr) -> Type | None:
    return e.checked_type if e.has_checked_type else None


def anchor_op(fn: Function) -> str:
    """The least fusable op of the group (conv2d in conv+bias+relu), naming its workload family."""
    best: tuple[int, str] | None = None
    for n in post_order(fn.body):
        if isinstance(n, Call) and isinstance(n.op, Op):
            p = int(registry.get(n.op.name).pattern) if registry.exists(n.op.name) else 8
            if best is None or p >= best[0]:
                best = (p, n.op.name)
    return best[1] if best else "identity"


class _Lowerer:
    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.inputs: list[Tensor] = []
        self.sources: list[InputSource] = []
        self.values: dict[int, Any] = {}  # expr id -> Tensor | list[Tensor]

    def run(self) -> LoweredFunction:
        for i, p in enumerate(self.fn.params):
            t = tensor_type(p.type_annotation or _type_of(p), f"parameter %{p.name_hint}")
            self._check_dtype(t, f"parameter %{p.name_hint}")
            ph = te.placeholder(t.concrete_shape, t.dtype, f"p{i}")
            self.inputs.append(ph)
            self.sources.append(InputSource("param", i))
            self.values[id(p)] = ph
        for n in post_order(self.fn.body):
            self._visit(n)
        out = self.values[id(self.fn.body)]
        outs = list(out) if isinstance(out, list) else [out]
        outs = _distinct_outputs(outs)
        _unique_names(outs, {t.name for t in self.inputs})
        cdef = inline_stages(ComputeDef(tuple(self.inputs), tuple(outs), "fused"))
        return LoweredFunction(cdef, tuple(self.sources), anchor_op(self.fn))

    @staticmethod
    def _check_dtype(t: TensorType, what: str) -> None:
        if t.dtype not in TE_DTYPES:
            raise NoCompute(what, f"dtype {t.dtype} has no kernel support")

    def _visit(self, n: Expr) -> None:
        if isinstance(n, Var | Op | Function) or id(n) in self.values:
            return
        if isinstance(n, Constant):
            self.values[id(n)] = self._constant(n)
        elif isinstance(n, Tuple):
            self.values[id(n)] = [self.values[id(f)] for f in n.fields]
        elif isinstance(n, TupleGetItem):
            self.values[id(n)] = self.values[id(n.tuple_value)][n.index]
        elif isinstance(n, Call) and isinstance(n.op, Op):
            self.values[id(n)] = self._call(n)
        else:
            raise NoCompute(type(n).__name__, "is not allowed in a primitive function")

    def _constant(self, c: Constant) -> Tensor:
        arr = np.asarray(c.data)
        dtype = str(arr.dtype)
        if dtype not in TE_DTYPES:
            raise NoCompute("constant", f"dtype {dtype} has no kernel support")
        if arr.size == 0:
            raise NoCompute("constant", f"empty constant of shape {arr.shape}")
        if arr.size == 1:  # a scalar: an inline stage, no buffer
            value = arr.reshape(()).item()
            return te.compute(arr.shape, lambda *i: E.const(value, dtype), name="const") if arr.ndim else \
                te.compute((), lambda: E.const(value, dtype), name="const")
        ph = te.placeholder(arr.shape, dtype, "c")
        ph.value = arr
        self._add_constant(ph)
        return ph

    def _add_constant(self, ph: Tensor) -> None:
        ph.name = f"c{sum(s.kind == 'const' for s in self.sources)}"
        self.inputs.append(ph)
        self.sources.append(InputSource("const", -1, ph.value))

    def _new_constants(self, out: Any) -> None:
        """Constants a compute made (`te.constant`) become kernel inputs like the IR's constants."""
        known = {id(t) for t in self.inputs}
        outs = list(out) if isinstance(out, list | tuple) else [out]
        for t in topo_order(outs):
            if t.is_placeholder and t.value is not None and id(t) not in known:
                self._add_constant(t)
                known.add(id(t))

    def _call(self, c: Call) -> Any:
        name = c.op.name  # type: ignore[union-attr]
        opdef = registry.get(name)
        if opdef.compute is None:
            raise NoCompute(name, "has no compute declaration")
        args: list[Tensor] = []
        for a in c.args:
            v = self.values[id(a)]
            args.extend(v if isinstance(v, list) else [v])
        out_type = _type_of(c)
        if out_type is None:
            raise NoCompute(name, "call is not typed (run type inference first)")
        if isinstance(out_type, TupleType):
            for f in out_type.fields:
                self._check_dtype(tensor_type(f, name), name)
        else:
            self._check_dtype(tensor_type(out_type, name), name)
        try:
            out = opdef.compute(args, c.attrs, out_type)
        except Unsupported as e:
            raise NoCompute(name, str(e)) from None
        except (TypeError, ValueError, IndexError) as e:  # a compute that cannot build: say so, loudly
            raise NoCompute(name, f"compute failed: {type(e).__name__}: {e}") from e
        self._new_constants(out)
        return list(out) if isinstance(out, list | tuple) else out


def _distinct_outputs(outs: list[Tensor]) -> list[Tensor]:
    """Each output its own computed stage: a bare input or a repeated output gets a copy stage."""
    seen: set[int] = set()
    out = []
    for k, t in enumerate(outs):
        if t.is_placeholder or id(t) in seen:
            t = _copy(t, f"out{k}")
        seen.add(id(t))
        out.append(t)
    return out


def _copy(src: Tensor, name: str) -> Tensor:
    if src.ndim:
        return te.compute(src.shape, lambda *i: src[i], name=name)
    return te.compute((), lambda: src[()], name=name)


def _unique_names(outputs: Sequence[Tensor], taken: set[str]) -> None:
    """Give every computed stage a unique name (schedule steps address stages by name)."""
    used = set(taken)
    for t in topo_order(outputs):
        if t.is_placeholder:
            continue
        base, k = t.name, 0
        name = base
        while name in used:
            k += 1
            name = f"{base}_{k}"
        t.name = name
        used.add(name)


def inline_stages(cdef: ComputeDef) -> ComputeDef:
    """Inline every non-output injective stage, except those (padding, Winograd's input transform,
    a GEMM's A operand) kept for the schedule to place."""
    return te.inline_injective(cdef, KEEP_TAGS, gemm_operands(cdef) | band_operands(cdef))


def gemm_operands(cdef: ComputeDef) -> set[int]:
    """The ids of computed stages a GEMM (`te.nn.matmul`'s tags) reads as its A operand: a fused
    prologue, which the dense template computes once when several column blocks read A, rather
    than on every read (`dense._rooted_prologue`)."""
    stages = topo_order(cdef.outputs)
    by_name = {t.name: t for t in stages}
    kept = set()
    for t in stages:
        if t.op is not None and t.op.tag in GEMM_TAGS and isinstance(t.op.body, E.Reduce):
            a = by_name.get(t.op.attrs.get("data", ""))
            if a is not None and a.op is not None and not isinstance(a.op.body, E.Reduce):
                kept.add(id(a))
    return kept


# a band kernel's reductions -> the reduction whose activated tail each reads (`band_operands`)
_BAND_TAILS = {"conv2d_nchwc": "depthwise_nchwc", "depthwise_nchwc": "conv2d_nchwc"}


def band_operands(cdef: ComputeDef) -> set[int]:
    """The ids of the computed stages that a depthwise band's kernel stores per band
    (`FusionPlan.depthwise_bands`, `conv2d_nchwc_dwpw`), activated, instead of a convolution
    applying the tail (bias, ReLU6) again on every read of a value (a tail's earlier stages inline
    into it):

    * the stages a direct NCHW[x]c convolution reads that are a depthwise convolution's
      elementwise tail: the band;
    * the stages a depthwise NCHW[x]c convolution reads (through its padding) that are a direct
      NCHW[x]c convolution's tail: the expansion's rows (`FusionPlan.expansions`)."""
    kept = set()
    for t in topo_order(cdef.outputs):
        if t.op is None or not isinstance(t.op.body, E.Reduce):
            continue
        reads_tail_of = _BAND_TAILS.get(t.op.tag)
        for a in t.op.inputs() if reads_tail_of else ():
            if a.op is not None and a.op.tag == "pad" and t.op.tag == "depthwise_nchwc":
                a = a.op.inputs()[0]
            if a.op is not None and not isinstance(a.op.body, E.Reduce) and _tail_of(a, reads_tail_of):
                kept.add(id(a))
    return kept


def _tail_of(t: Tensor, tag: str) -> bool:
    """Whether injective stage `t` reads, through injective stages only, a reduction tagged `tag`."""
    for a in t.op.inputs():  # type: ignore[union-attr]
        if a.op is None:
            continue
        if isinstance(a.op.body, E.Reduce):
            if a.op.tag == tag:
                return True
        elif _tail_of(a, tag):
            return True
    return False


@deep
def lower(fn: Function) -> LoweredFunction:
    """Lower a typed primitive function; raises `NoCompute` when some op cannot be lowered."""
    return _Lowerer(fn).run()


def lower_primitive(fn: Function) -> ComputeDef:
    """The compute DAG of a typed primitive function (inputs: its parameters, then tensor constants)."""
    return lower(fn).cdef
