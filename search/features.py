"""Per-candidate features for the cost model, read from the lowered loop IR (AutoTVM's "itervar"
features in spirit) plus the raw knob values.

The loop IR says what a schedule really did — which loops are parallel, vectorized or unrolled,
their extents, how each buffer is strided at each loop level, how much each buffer is reused and
how many bytes the hot loop nest touches — so the model learns from structure, not from knob
names alone, and the features of one workload mean the same thing for a similar one (transfer).
The vector has a fixed length whatever the template, so one model can mix workloads.

GPU schedules add what decides a kernel's speed there and is visible before compiling
(`gpu_features`, zeros for CPU code): threads per block, blocks, shared memory, each thread's
private (register) bytes, the occupancy those allow, and how many launches the kernel takes.
Registers as ptxas counts them would need each candidate assembled; the private bytes stand in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autorelay.schedule.space import Config
from autorelay.te.expr import Bin, Call, Cast, Cmp, Const, Expr, Load, Not, Select, Var, is_float, walk
from autorelay.tir.nodes import Allocate, For, If, PrimFunc, Seq, Stmt, Store

LEVELS = 6  # innermost loop levels of the hot nest described one by one
BUFFERS = 4  # buffers of the hot statement described one by one
KNOBS = 10
KINDS = ("serial", "parallel", "vectorized", "unrolled")
_DTYPE_BYTES = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "int8": 1, "uint8": 1, "bool": 1}

PER_LEVEL = 1 + len(KINDS)
PER_BUFFER = 8
GLOBAL = 11
GPU = 7
LENGTH = LEVELS * PER_LEVEL + BUFFERS * PER_BUFFER + GLOBAL + GPU + 2 * KNOBS


def _lg(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def _int_eval(e: Expr, env: dict[int, int]) -> int:
    """Integer value of an index expression with loop variables bound by id (unknown leaves are 0)."""
    if isinstance(e, Var):
        return env.get(id(e), 0)
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Bin):
        a, b = _int_eval(e.a, env), _int_eval(e.b, env)
        op = e.op
        if op == "add":
            return a + b
        if op == "sub":
            return a - b
        if op == "mul":
            return a * b
        if op in ("floordiv", "div"):
            return a // b if b else 0
        if op == "mod":
            return a % b if b else 0
        if op == "min":
            return min(a, b)
        if op == "max":
            return max(a, b)
        return 0
    if isinstance(e, Select):
        return _int_eval(e.t, env) if _int_eval(e.cond, env) else _int_eval(e.f, env)
    if isinstance(e, Cmp):
        a, b = _int_eval(e.a, env), _int_eval(e.b, env)
        return int({"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[e.op])
    if isinstance(e, Not):
        return int(not _int_eval(e.a, env))
    if isinstance(e, Cast):
        return _int_eval(e.a, env)
    return 0


def _stride(index: Expr, var: Var) -> int:
    """Elements the index moves when `var` goes 0 -> 1 (others 0): the access stride of a loop."""
    return abs(_int_eval(index, {id(var): 1}) - _int_eval(index, {}))


@dataclass
class _Nest:
    loops: list[For]
    store: Store


def _nests(s: Stmt, loops: list[For], out: list[_Nest]) -> None:
    if isinstance(s, For):
        _nests(s.body, [*loops, s], out)
    elif isinstance(s, Store):
        out.append(_Nest(loops, s))
    elif isinstance(s, Seq):
        for t in s.stmts:
            _nests(t, loops, out)
    elif isinstance(s, Allocate):
        _nests(s.body, loops, out)
    elif isinstance(s, If):
        _nests(s.then, loops, out)
        if s.orelse is not None:
            _nests(s.orelse, loops, out)


def _trip(loops: list[For]) -> int:
    n = 1
    for f in loops:
        n *= f.extent
    return n


def _buffer_features(nest: _Nest) -> tuple[list[list[float]], float, float]:
    """Per accessed buffer (store first, then loads by first appearance): access count, bytes
    touched, reuse, innermost and next strides, contiguity flags, local scope. Returns them with
    the nest's total bytes touched and float operations."""
    accesses: list[tuple[object, Expr]] = [(nest.store.buffer, nest.store.index)]
    seen = {id(nest.store.buffer)}
    flops = 0
    for n in walk(nest.store.value):
        if isinstance(n, Load) and id(n.buffer) not in seen:
            seen.add(id(n.buffer))
            accesses.append((n.buffer, n.index))
        elif isinstance(n, (Bin, Call)) and is_float(n.dtype):
            flops += 1
    trip = _trip(nest.loops)
    inner = [f for f in reversed(nest.loops)]
    rows, total_bytes = [], 0.0
    for buf, idx in accesses:
        strides = [_stride(idx, f.var) for f in inner]
        touched = 1
        for f, st in zip(inner, strides):
            if st:
                touched *= f.extent
        touched = min(touched, buf.size)
        nbytes = touched * _DTYPE_BYTES.get(buf.dtype, 4)
        total_bytes += nbytes if buf.scope != "local" else 0
        s0 = strides[0] if strides else 0
        s1 = strides[1] if len(strides) > 1 else 0
        rows.append([_lg(trip), _lg(nbytes), _lg(trip / max(touched, 1)), _lg(s0), _lg(s1),
                     float(s0 == 1), float(s0 == 0), float(buf.scope == "local")])
    return rows, total_bytes, float(flops * trip)


def knob_features(config: Config | None) -> list[float]:
    """Per knob (in order, padded to KNOBS): its numeric value (log-scaled) and a hash of strings."""
    vals: list[float] = []
    for _, v in (config.values if config is not None else ())[:KNOBS]:
        if isinstance(v, (bool, int, float)):
            vals += [_lg(abs(float(v))), 1.0]
        elif isinstance(v, str):
            vals += [float(sum(map(ord, v)) % 97) / 97.0, 0.0]
        else:
            vals += [_lg(len(v)) if hasattr(v, "__len__") else 0.0, 0.0]
    return vals + [0.0] * (2 * KNOBS - len(vals))


def extract(func: PrimFunc, config: Config | None = None) -> tuple[float, ...]:
    """The fixed-length feature vector of one lowered candidate (length `LENGTH`)."""
    nests: list[_Nest] = []
    _nests(func.body, [], nests)
    if not nests:
        return tuple([0.0] * LENGTH)
    hot = max(nests, key=lambda n: _trip(n.loops))
    feats: list[float] = []
    levels = list(reversed(hot.loops))[:LEVELS]
    for f in levels:
        feats += [_lg(f.extent)] + [float(f.kind == k) for k in KINDS]
    feats += [0.0] * (PER_LEVEL * (LEVELS - len(levels)))
    rows, _, _ = _buffer_features(hot)
    for r in rows[:BUFFERS]:
        feats += r
    feats += [0.0] * (PER_BUFFER * (BUFFERS - min(len(rows), BUFFERS)))
    total_bytes = total_flops = 0.0
    for n in nests:
        _, b, fl = _buffer_features(n)
        total_bytes += b
        total_flops += fl
    all_loops = [f for n in nests for f in n.loops]
    uniq = {id(f): f for f in all_loops}.values()
    par = [f for f in uniq if f.kind == "parallel"]
    vec = [f for f in hot.loops if f.kind == "vectorized"]
    unr = [f for f in hot.loops if f.kind == "unrolled"]
    local = sum(b.size for b in _allocs(func.body))
    feats += [
        _lg(total_flops), _lg(total_bytes), _lg(total_flops / max(total_bytes, 1.0)),
        float(len(uniq)), float(len(par)), _lg(sum(f.extent for f in par)),
        _lg(_trip(vec)), _lg(_trip(unr)), float(len(nests)), _lg(local), float(len(func.workspaces)),
    ]
    feats += gpu_features(func)
    feats += knob_features(config)
    assert len(feats) == LENGTH, (len(feats), LENGTH)
    return tuple(feats)


def gpu_features(func: PrimFunc) -> list[float]:
    """The GPU block of the vector (see the module docstring), for the kernel's largest launch;
    zeros when no loop is bound to a block or thread index."""
    from autorelay.codegen.nvptx.device import SM_BLOCKS, SM_SHARED, SM_THREADS
    from autorelay.codegen.nvptx.launch import launch_of, shared_bytes
    from autorelay.tir.nodes import BLOCK_TAGS, THREAD_TAGS, walk_stmts

    tags = BLOCK_TAGS + THREAD_TAGS
    segs = [s for s in (func.body.stmts if isinstance(func.body, Seq) else (func.body,))
            if any(isinstance(t, For) and t.kind in tags for t in walk_stmts(s))]
    if not segs:
        return [0.0] * GPU
    try:
        launches = [(launch_of(s), s) for s in segs]
    except Exception:  # an illegal launch: the builder reports it; describe it as nothing
        return [0.0] * GPU
    launch, seg = max(launches, key=lambda ls: ls[0].threads * ls[0].grid[0] * ls[0].grid[1] * ls[0].grid[2])
    threads = launch.threads
    blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
    smem = shared_bytes(seg)
    private = sum(t.buffer.size * _DTYPE_BYTES.get(t.buffer.dtype, 4) for t in walk_stmts(seg)
                  if isinstance(t, Allocate) and t.buffer.scope == "local")
    warps = -(-threads // 32)
    resident = min(SM_BLOCKS, SM_THREADS // (warps * 32), SM_SHARED // smem if smem else SM_BLOCKS)
    occupancy = resident * warps * 32 / SM_THREADS
    return [_lg(threads), _lg(blocks), float(warps % 4 == 0), _lg(smem), _lg(private), occupancy,
            float(len(segs))]


def _allocs(s: Stmt) -> list:
    from autorelay.tir.nodes import walk_stmts

    return [n.buffer for n in walk_stmts(s) if isinstance(n, Allocate)]
