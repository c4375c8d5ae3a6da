"""Injective and reduction templates (elementwise, broadcast, transforms, reductions, pooling,
softmax-like row computations).

Both fuse the leading output axes into one parallel loop and vectorize the last axis. The
reduction template computes each reduction stage at that loop nest: a reduction whose output has
the same rank as the kernel output is computed per vector of outputs (lanes accumulate in a
local vector), others (row statistics such as softmax's max and sum) once per row.
"""

from __future__ import annotations

from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, blocked_window_pool, conv_and_pool, pattern, register
from autorelay.target import Target
from autorelay.te.expr import Const, Read, Reduce
from autorelay.te.tensor import ComputeDef, Tensor, topo_order
from autorelay.te.traverse import walk


def _size(t: Tensor) -> int:
    n = 1
    for s in t.shape:
        n *= s
    return n


def _outer_fuse(out: str, axes: list[str]) -> tuple[list[S.Step], str | None]:
    """Fuse all of `axes` into one loop; returns the steps and the fused name."""
    if not axes:
        return [], None
    steps: list[S.Step] = []
    name = axes[0]
    for a in axes[1:]:
        steps.append(S.Fuse(out, name, a))
        name = f"{name}_{a}"
    return steps, name


def vector_axis(stage: str, axis: str, extent: int, lanes: int) -> list[S.Step]:
    """Vectorise a channel-block axis: one vector when it fits, else whole vectors of `lanes`,
    unrolled (a block of 32 on AVX2: four vectors side by side)."""
    if extent <= lanes:
        return [S.Vectorize(stage, axis)]
    return [S.Split(stage, axis, lanes), S.Unroll(stage, f"{axis}_o"), S.Vectorize(stage, f"{axis}_i")]


def _vector_last(out: str, last: str, vec: int, unroll: int) -> tuple[list[S.Step], str]:
    """Split the last axis into [outer, (unroll), vector]; returns steps and the outer loop name."""
    steps: list[S.Step] = []
    outer = last
    if vec > 1:
        steps += [S.Split(out, last, vec), S.Vectorize(out, f"{last}_i")]
        outer = f"{last}_o"
    if unroll > 1:
        steps += [S.Split(out, outer, unroll), S.Unroll(out, f"{outer}_i")]
        outer = f"{outer}_o"
    return steps, outer


class InjectiveTemplate(Template):
    name = "injective"
    tags = ("injective", "elemwise", "broadcast")

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        return Space(
            self.name,
            (
                Knob(
                    "vectorize",
                    (1, target.vector_lanes(cdef.output.dtype if cdef.output.dtype != "bool" else "int8")),
                ),
                Knob("unroll", (1, 2, 4)),
                Knob("parallel", (0, 1)),
                Knob("fuse_all", (0, 1)),
            ),
        )

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        out = cdef.output
        lanes = self.space(cdef, target).knob("vectorize").values[-1]
        vec = lanes if out.shape and (out.shape[-1] >= lanes or _size(out) >= 4 * lanes) else 1
        # one flat loop fills whole vectors when the last axis is short, but only an elementwise
        # kernel keeps its reads contiguous in the flat index: a transpose, a layout transform or a
        # broadcast must recover every lane's coordinates by division. Measured (AVX-512, 2
        # threads): NCHW16c -> NCHW at 256x14x14 took 219 us fused and 29 us not; a bias add at
        # 64x56x56 349 us and 45 us; a plain add at 256x14x14 23 us and 32 us.
        fuse_all = 1 if out.shape and out.shape[-1] < lanes and _flat_elementwise(out) else 0
        par = 1 if _size(out) >= 1 << 15 else 0
        return Config(
            self.name, (("vectorize", vec), ("unroll", 1), ("parallel", par), ("fuse_all", fuse_all))
        )

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        out = cdef.output
        steps: list[S.Step] = [
            S.ComputeInline(t.name) for t in topo_order([out]) if t.op is not None and t is not out
        ]
        axes = [a.name for a in out.op.axes]  # type: ignore[union-attr]
        if not axes:
            return tuple(steps)
        if config["fuse_all"]:
            fs, name = _outer_fuse(out.name, axes)
            steps += fs
            axes = [name]  # type: ignore[list-item]
        fs, outer = _outer_fuse(out.name, axes[:-1])
        steps += fs
        vs, last_outer = _vector_last(out.name, axes[-1], config["vectorize"], config["unroll"])
        steps += vs
        if config["parallel"]:
            steps.append(S.Parallel(out.name, outer or last_outer))
        return tuple(steps)


def _reduction_lanes(cdef: ComputeDef, target: Target) -> int:
    """The vector width of a reduction's output axis: a full register, except for byte outputs,
    whose register (64 lanes on AVX-512) is wider than a channel block (8, 16) of a blocked
    layout's last axis: there the widest power of two the axis holds."""
    lanes = target.vector_lanes(cdef.output.dtype)
    last = cdef.output.shape[-1] if cdef.output.shape else 1
    if cdef.output.dtype in ("int8", "uint8") and last < lanes:
        return max(1, 1 << (last.bit_length() - 1))
    return lanes


class ReductionTemplate(Template):
    name = "reduction"
    tags = ("reduce", "pool", "softmax", "comm_reduce")

    def claims(self, cdef: ComputeDef) -> bool:
        """Not a convolution with its pooling epilogue: `conv2d_nchwc_pool` and
        `conv2d_winograd_nchwc_pool` schedule those (this template would inline the convolution
        into every window that reads it); nor a float pooling of blocked windows, which
        `pool2d_nchwc` tiles."""
        return conv_and_pool(cdef) is None and not blocked_window_pool(cdef)

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        return Space(
            self.name,
            (
                Knob("vectorize", (1, _reduction_lanes(cdef, target))),
                Knob("unroll_reduce", (1, 2, 4)),
                Knob("parallel", (0, 1)),
            ),
        )

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        out = cdef.output
        lanes = _reduction_lanes(cdef, target)
        vec = lanes if out.shape and out.shape[-1] >= lanes // 2 and lanes > 1 else 1
        par = 1 if _size(out) * _reduce_size(cdef) >= 1 << 15 and len(out.shape) > 1 else 0
        return Config(self.name, (("vectorize", vec), ("unroll_reduce", 1), ("parallel", par)))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        pat = pattern(cdef)
        out = pat.output
        stages = [t for t in topo_order([out]) if t.op is not None and t is not out]
        reds = [t for t in stages if isinstance(t.op.body, Reduce)]  # type: ignore[union-attr]
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in stages if t not in reds]
        accs: list[tuple[str, Tensor]] = [(t.name, t) for t in reds]
        if isinstance(out.op.body, Reduce):  # type: ignore[union-attr]
            steps.append(S.CacheWrite(out.name))
            accs.append((f"{out.name}_local", out))
        axes = [a.name for a in out.op.axes]  # type: ignore[union-attr]
        if not axes:
            return tuple(steps)
        vec = config["vectorize"]
        fs, outer = _outer_fuse(out.name, axes[:-1])
        steps += fs
        vs, last_outer = _vector_last(out.name, axes[-1], vec, 1)
        steps += vs
        # a reduction the output loop nest does not read itself (one feeding another reduction, as
        # argmax's extremum feeds its index search) cannot be computed at the output's tiles
        read_by_out = set() if isinstance(out.op.body, Reduce) else _reads_through_inlined(out)
        for name, t in accs:
            # a statistic kept as extent 1 on the vectorized axis (layer norm's row mean) is a row
            # statistic too: computed once per row, not once per vector of outputs; so is one of
            # another extent there (a blocked scan's carry, one per block of the row)
            aligned = len(t.shape) == len(out.shape) and t.shape[-1] == out.shape[-1]
            at = last_outer if aligned else (outer or last_outer)
            if not aligned and outer is None:
                at = None  # a row statistic of a 1-D output: compute it at root
            if t is not out and id(t) not in read_by_out:
                at = None
            if at is not None:
                steps.append(S.ComputeAt(name, out.name, at))
            r_axes = [a.name for a in t.op.reduce_axes]  # type: ignore[union-attr]
            s_axes = [a.name for a in t.op.axes]  # type: ignore[union-attr]
            if config["unroll_reduce"] > 1 and r_axes:
                steps += [S.Split(name, r_axes[-1], config["unroll_reduce"])]
                r_axes = r_axes[:-1] + [f"{r_axes[-1]}_o", f"{r_axes[-1]}_i"]
                steps.append(S.Unroll(name, r_axes[-1]))
            if aligned and at is not None and vec > 1 and s_axes:
                steps.append(S.Reorder(name, (*s_axes[:-1], *r_axes, s_axes[-1])))
                steps.append(S.Vectorize(name, s_axes[-1]))
        if config["parallel"]:
            steps.append(S.Parallel(out.name, outer or last_outer))
        return tuple(steps)


def _flat_elementwise(out: Tensor) -> bool:
    """Whether every stage of `out`'s kernel (itself and the producers inlined into it) reads each
    tensor at its own index (same shape, the stage's axes in order) or at a constant index, so the
    kernel is one map over the flattened index."""
    for t in topo_order([out]):
        if t.op is None:
            continue
        if isinstance(t.op.body, Reduce):
            return False
        axes = tuple(a.var for a in t.op.axes)
        for node in walk(t.op.body):
            if not isinstance(node, Read):
                continue
            same = tuple(node.tensor.shape) == tuple(t.shape) and len(node.indices) == len(axes) \
                and all(i is v for i, v in zip(node.indices, axes))
            if not same and not all(isinstance(i, Const) for i in node.indices):
                return False
    return True


def _reads_through_inlined(out: Tensor) -> set[int]:
    """Ids of the tensors `out` reads once its injective producers are inlined into it."""
    seen: set[int] = set()
    todo = list(out.op.inputs())  # type: ignore[union-attr]
    while todo:
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.op is not None and not isinstance(t.op.body, Reduce):
            todo.extend(t.op.inputs())
    return seen


def _reduce_size(cdef: ComputeDef) -> int:
    n = 1
    for t in topo_order([cdef.output]):
        if t.op is not None and isinstance(t.op.body, Reduce):
            for a in t.op.body.axes:
                n *= a.extent
    return n


register(InjectiveTemplate())
register(ReductionTemplate())
