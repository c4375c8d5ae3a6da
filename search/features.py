"""Per-candidate features for the cost model, read from the lowered loop IR (AutoTVM's "itervar"
features in spirit) plus the raw knob values.

The loop IR says what a schedule really did — which loops are parallel, vectorized or unrolled,
their extents, how each buffer is strided at each loop level, how much each buffer is reused and
how many bytes the hot loop nest touches — so the model learns from structure, not from knob
names alone, and the features of one workload mean the same thing for a similar one (transfer).
The vector has a fixed length whatever the template, so one model can mix workloads.

GPU schedules add what decides a kernel's speed there (`gpu_features`, zeros for CPU code), for
the kernel's largest launch: threads per block, blocks, shared memory, each thread's private
bytes, the occupancy threads and shared memory allow against the target's per-multiprocessor
limits, how many launches the kernel takes — all read from the loop IR — and what only the
assembler knows: the registers per thread `ptxas -v` reports for the target's arch (that kernel's,
and the most of any kernel of the module: the one whose register pressure may spill), and the
occupancy with those registers counted (`codegen.nvptx.device.occupancy`). The registers come
with the compiled candidate (`code_features`; the builder and, for cuda tasks, the featurizer
compile to PTX, and ptxas runs once per PTX text). Where ptxas is absent or fails, the three
register features are 0 and the `registers known` flag is 0 (1 when known), so the vector has
the same length with or without ptxas.
"""

from __future__ import annotations

import functools
import hashlib
import math
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autorelay.codegen.nvptx.device import occupancy, resolve_cuda
from autorelay.codegen.nvptx.launch import launch_of, shared_bytes
from autorelay.codegen.nvptx.ptx import PTXError, ptxas_path, run_ptxas
from autorelay.errors import ScheduleError
from autorelay.kernel import KernelCode
from autorelay.kernel_store import compiler_fingerprint
from autorelay.schedule.space import Config
from autorelay.target import Target, TargetSpec
from autorelay.te.expr import Bin, Call, Cast, Cmp, Const, Expr, Load, Not, Select, Var, is_float
from autorelay.te.traverse import children, distinct_nodes
from autorelay.tir.nodes import (
    BLOCK_TAGS,
    THREAD_TAGS,
    Allocate,
    For,
    If,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    walk_stmts,
)

LEVELS = 6  # innermost loop levels of the hot nest described one by one
BUFFERS = 4  # buffers of the hot statement described one by one
KNOBS = 10
KINDS = ("serial", "parallel", "vectorized", "unrolled")
_DTYPE_BYTES = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "int8": 1, "uint8": 1, "bool": 1}

PER_LEVEL = 1 + len(KINDS)
PER_BUFFER = 8
GLOBAL = 11
GPU = 11  # see gpu_features
LENGTH = LEVELS * PER_LEVEL + BUFFERS * PER_BUFFER + GLOBAL + GPU + 2 * KNOBS


@functools.cache
def features_version() -> str:
    """Names the vectors this code makes in the tuning log (`search.feature_log`): a digest of the
    `search` package (this module, and the tasks that describe their configs themselves, such as
    the accelerator's) and of the compiler that lowers the configs (`kernel_store.
    compiler_fingerprint`: every source file of `autorelay`), so a changed definition or lowering
    never reads older vectors."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256(compiler_fingerprint().encode())
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return f"n{LENGTH}-{digest.hexdigest()[:16]}"


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


def _float_ops(e: Expr) -> int:
    """Float operations of `e` counted as if its shared subtrees were copied out (a subtree two
    parents share is computed for each), each distinct node visited once: a Winograd transform's
    select chains share subtrees many paths reach, and walking every path took most of `extract`."""
    memo: dict[int, int] = {}

    def go(n: Expr) -> int:
        got = memo.get(id(n))
        if got is None:
            got = int(isinstance(n, (Bin, Call)) and is_float(n.dtype)) + sum(go(k) for k in children(n))
            memo[id(n)] = got
        return got

    return go(e)


def _buffer_features(nest: _Nest) -> tuple[list[list[float]], float, float]:
    """Per accessed buffer (store first, then loads by first appearance): access count, bytes
    touched, reuse, innermost and next strides, contiguity flags, local scope. Returns them with
    the nest's total bytes touched and float operations."""
    accesses: list[tuple[object, Expr]] = [(nest.store.buffer, nest.store.index)]
    seen = {id(nest.store.buffer)}
    for n in distinct_nodes(nest.store.value):  # first appearances in the same order as a full walk
        if isinstance(n, Load) and id(n.buffer) not in seen:
            seen.add(id(n.buffer))
            accesses.append((n.buffer, n.index))
    flops = _float_ops(nest.store.value)
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


def extract(func: PrimFunc, config: Config | None = None, target: Target | None = None,
            registers: Sequence[int] | None = None) -> tuple[float, ...]:
    """The fixed-length feature vector of one lowered candidate (length `LENGTH`). For a GPU
    kernel: `target` its cuda target (None: the default arch's limits), `registers` what ptxas
    reports per segment of `func` (None: unknown)."""
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
    feats += gpu_features(func, target, registers)
    feats += knob_features(config)
    assert len(feats) == LENGTH, (len(feats), LENGTH)
    return tuple(feats)


@functools.cache
def _default_gpu() -> Target:
    """The limits a GPU kernel is described against when no target is given: the default arch's."""
    return resolve_cuda(TargetSpec("cuda", options=(("device", "emulated"),)))


def gpu_features(func: PrimFunc, target: Target | None = None,
                 registers: Sequence[int] | None = None) -> list[float]:
    """The GPU block of the vector (see the module docstring), `GPU` long, for the kernel's largest
    launch; zeros when no loop is bound to a block or thread index:

    0 log threads per block, 1 log blocks, 2 warps a multiple of 4, 3 log shared bytes, 4 log
    private bytes per thread, 5 occupancy from threads and shared memory, 6 launches,
    7 registers known (1) or not (0), 8 log registers of that kernel, 9 log the most registers of
    any kernel, 10 occupancy with registers counted (8-10 are 0 when registers are unknown)."""
    tags = BLOCK_TAGS + THREAD_TAGS
    segs = list(func.body.stmts) if isinstance(func.body, Seq) else [func.body]
    bound = [k for k, s in enumerate(segs)
             if any(isinstance(t, For) and t.kind in tags for t in walk_stmts(s))]
    if not bound:
        return [0.0] * GPU
    target = target if target is not None and target.kind == "cuda" else _default_gpu()
    try:
        launches = {k: launch_of(segs[k], target) for k in bound}
    except ScheduleError:  # an illegal launch: the builder reports it; describe it as nothing
        return [0.0] * GPU
    hot = max(bound, key=lambda k: launches[k].threads * math.prod(launches[k].grid))
    launch, seg = launches[hot], segs[hot]
    threads, smem = launch.threads, shared_bytes(seg)
    private = sum(t.buffer.size * _DTYPE_BYTES.get(t.buffer.dtype, 4) for t in walk_stmts(seg)
                  if isinstance(t, Allocate) and t.buffer.scope == "local")
    warps = -(-threads // target.warp_size)
    feats = [_lg(threads), _lg(math.prod(launch.grid)), float(warps % 4 == 0), _lg(smem), _lg(private),
             occupancy(target, threads, smem), float(len(bound))]
    if registers is None or len(registers) != len(segs) or not registers[hot]:
        return feats + [0.0, 0.0, 0.0, 0.0]
    regs = registers[hot]
    return feats + [1.0, _lg(regs), _lg(max(registers)), occupancy(target, threads, smem, regs)]


def ptxas_registers(code: KernelCode) -> list[int] | None:
    """Registers per thread of each segment of a cuda kernel, as `ptxas -v` reports them for the
    target's arch; None for other targets, or where ptxas is absent or fails (the builder then
    reports the failure; the features just say 'unknown')."""
    if code.target.kind != "cuda" or ptxas_path() is None:
        return None
    try:
        report = run_ptxas(code.code.ptx, code.target.arch)  # type: ignore[attr-defined]
    except (PTXError, OSError, subprocess.SubprocessError):
        return None
    return [report.kernels.get(name, {}).get("registers", 0) for name, _ in code.code.segments]


def code_features(code: KernelCode, config: Config | None = None) -> tuple[float, ...]:
    """`extract` for a compiled candidate: its loop IR, its target, and for cuda its registers."""
    return extract(code.func, config, code.target, ptxas_registers(code))


def _allocs(s: Stmt) -> list:
    return [n.buffer for n in walk_stmts(s) if isinstance(n, Allocate)]
