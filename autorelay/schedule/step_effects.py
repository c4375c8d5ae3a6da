"""What each schedule step does to the schedule state (`autorelay.schedule.state`).

`apply_step` checks a step against the stage it names and edits the state: loop splits, fusions
and reorders, annotations, attachment (ComputeAt, ComputeInline), and the steps that add or rewrite
stages (CacheRead, CacheWrite, Pack, Pad, the implicit GEMM of a convolution).
"""

from __future__ import annotations

from autorelay.errors import ScheduleError
from autorelay.schedule import steps as S
from autorelay.schedule.implicit_gemm import conv_operands, gemm_parts
from autorelay.schedule.state import Stage, State, make_stage
from autorelay.te.expr import Bin, Call, Cast, Expr, IterVar, Read, Var
from autorelay.te.tensor import ComputeOp, Tensor, placeholder
from autorelay.te.traverse import distinct_nodes, transform, walk
from autorelay.tir.nodes import BLOCK_TAGS, DOT_KINDS, THREAD_TAGS


def _check_free(st: Stage, v: Var, what: str) -> None:
    if st.kind[v] != "serial":
        raise ScheduleError(f"stage {st.name}: cannot {what} axis {v.name} already marked {st.kind[v]}")


def apply_step(state: State, step: S.Step) -> None:
    """Edit `state` by one step; raise ScheduleError naming the step if it is illegal."""
    if isinstance(step, S.Pack):
        _pack(state, step)
        return
    if isinstance(step, S.CacheRead):
        _cache_read(state, step)
        return
    if isinstance(step, S.ImplicitGemm):
        _implicit_gemm(state, state.stage(step.stage))
        return
    st = state.stage(step.stage)
    if isinstance(step, S.Split):
        v = st.leaf(step.axis)
        if int(step.factor) < 1:
            raise ScheduleError(f"Split {st.name}.{step.axis}: factor must be >= 1, got {step.factor}")
        _check_free(st, v, "split")
        o, i = st.new_var(step.outer_name), st.new_var(step.inner_name)
        pos = st.leaves.index(v)
        st.leaves[pos : pos + 1] = [o, i]
        if step.shift_tail and v in st.is_reduce_var:
            raise ScheduleError(f"Split {st.name}.{step.axis}: a reduction axis cannot shift its tail")
        st.rels.append(("split", v, o, i, int(step.factor), bool(step.shift_tail)))
        st.kind[o] = st.kind[i] = "serial"
        if v in st.is_reduce_var:
            st.is_reduce_var |= {o, i}
    elif isinstance(step, S.Reorder):
        vs = [st.leaf(a) for a in step.order]
        if len(set(vs)) != len(vs):
            raise ScheduleError(f"Reorder {st.name}: repeated axis in {step.order}")
        positions = sorted(st.leaves.index(v) for v in vs)
        for p, v in zip(positions, vs):
            st.leaves[p] = v
    elif isinstance(step, S.Fuse):
        a, b = st.leaf(step.outer), st.leaf(step.inner)
        pa, pb = st.leaves.index(a), st.leaves.index(b)
        if pb != pa + 1:
            raise ScheduleError(f"Fuse {st.name}: {step.outer} must directly precede {step.inner}")
        if (a in st.is_reduce_var) != (b in st.is_reduce_var):
            raise ScheduleError(f"Fuse {st.name}: cannot fuse a spatial and a reduction axis")
        _check_free(st, a, "fuse")
        _check_free(st, b, "fuse")
        f = st.new_var(step.fused_name)
        st.leaves[pa : pb + 1] = [f]
        st.rels.append(("fuse", a, b, f))
        st.kind[f] = "serial"
        if a in st.is_reduce_var:
            st.is_reduce_var.add(f)
    elif isinstance(step, (S.Vectorize, S.Unroll, S.Parallel)):
        v = st.leaf(step.axis)
        _check_free(st, v, type(step).__name__.lower())
        kind = {S.Vectorize: "vectorized", S.Unroll: "unrolled", S.Parallel: "parallel"}[type(step)]
        if kind in ("vectorized", "parallel") and v in st.is_reduce_var:
            raise ScheduleError(
                f"{type(step).__name__} {st.name}.{step.axis}: a reduction axis cannot be {kind}"
            )
        st.kind[v] = kind
    elif isinstance(step, S.Tensorize):
        _tensorize(st, step)
    elif isinstance(step, S.Bind):
        _bind(st, step)
    elif isinstance(step, S.CacheWrite):
        _cache_write(state, st)
    elif isinstance(step, S.ComputeAt):
        tgt = state.stage(step.target)
        if st.is_output or st.inline:
            raise ScheduleError(f"ComputeAt {st.name}: an output or inlined stage cannot be moved")
        if not any(tgt is c or state.computed_inside(c, tgt) for c in state.consumers(st)):
            raise ScheduleError(f"ComputeAt {st.name}: target {tgt.name} does not read it (neither itself "
                                "nor through a stage computed inside it)")
        st.attach = (tgt.name, tgt.leaf(step.axis))
        st.scope = "shared" if st.scope == "shared" else "local"
    elif isinstance(step, S.ComputeInline):
        if st.combiner is not None or st.is_output:
            raise ScheduleError(f"ComputeInline {st.name}: only a non-output injective stage can be inlined")
        if st.rels or st.attach or any(k != "serial" for k in st.kind.values()):
            raise ScheduleError(f"ComputeInline {st.name}: the stage was already scheduled")
        st.inline = True
    elif isinstance(step, S.Pad):
        _pad(state, st, step)
    elif isinstance(step, S.CrossThreadReduce):
        _cross_thread(st, step)
    else:
        raise ScheduleError(f"unknown schedule step {step!r}")


TENSORIZE_INTRINSICS = DOT_KINDS


def _tensorize(st: Stage, step: S.Tensorize) -> None:
    v = st.leaf(step.axis)
    if step.intrinsic not in TENSORIZE_INTRINSICS:
        raise ScheduleError(f"Tensorize {st.name}.{step.axis}: unknown intrinsic {step.intrinsic!r} "
                            f"(known: {', '.join(TENSORIZE_INTRINSICS)})")
    _check_free(st, v, "tensorize")
    if v not in st.is_reduce_var or st.combiner != "sum":
        raise ScheduleError(f"Tensorize {st.name}.{step.axis}: a dot needs a reduction axis of a sum")
    st.kind[v] = step.intrinsic


def _bind(st: Stage, step: S.Bind) -> None:
    v = st.leaf(step.axis)
    if step.thread not in BLOCK_TAGS + THREAD_TAGS:
        raise ScheduleError(f"Bind {st.name}.{step.axis}: unknown index {step.thread!r} "
                            f"(known: {', '.join(BLOCK_TAGS + THREAD_TAGS)})")
    _check_free(st, v, "bind")
    if v in st.is_reduce_var:
        raise ScheduleError(f"Bind {st.name}.{step.axis}: a reduction axis cannot be bound to {step.thread}")
    if step.thread in st.kind.values():
        raise ScheduleError(f"Bind {st.name}.{step.axis}: {step.thread} is already bound in this stage")
    st.kind[v] = step.thread


def _cross_thread(st: Stage, step: S.CrossThreadReduce) -> None:
    t = int(step.threads)
    if st.combiner is None or st.inline:
        raise ScheduleError(f"CrossThreadReduce {st.name}: only a reduction stage reduces across threads")
    if t < 32 or t > 1024 or t & (t - 1):
        raise ScheduleError(f"CrossThreadReduce {st.name}: threads must be a power of two in 32..1024, "
                            f"got {t}")
    w = int(step.warp)
    if w < 0 or w & (w - 1) or w == 1:
        raise ScheduleError(f"CrossThreadReduce {st.name}: warp must be 0 (no shuffles) or a power of two "
                            f">= 2 (the target's warp size), got {w}")
    st.cross_threads, st.cross_warp = t, w


def _cache_read(state: State, step: S.CacheRead) -> None:
    if step.scope != "shared":
        raise ScheduleError(f"CacheRead {step.tensor}: unknown scope {step.scope!r} (known: shared)")
    if step.tensor not in state.inputs:
        raise ScheduleError(f"CacheRead: {step.tensor!r} is not an input (inputs: {', '.join(state.inputs)})")
    t = state.inputs[step.tensor]
    name = f"{t.name}_{step.scope}"
    if any(s.name == name for s in state.stages):
        raise ScheduleError(f"CacheRead {t.name}: stage {name} already exists")
    readers = [state.stage(r) for r in step.readers]
    if not readers:
        raise ScheduleError(f"CacheRead {t.name}: no reader stages given")
    axes = tuple(IterVar(Var(f"ax{d}"), s) for d, s in enumerate(t.shape))
    copy_t = Tensor(name, t.shape, t.dtype, ComputeOp(axes, Read(t, tuple(a.var for a in axes), t.dtype),
                                                      "injective"))
    for r in readers:
        if not any(isinstance(n, Read) and n.tensor is t for n in distinct_nodes(r.body)):
            raise ScheduleError(f"CacheRead {t.name}: stage {r.name} does not read it")
        r.body = transform(r.body, lambda n: Read(copy_t, n.indices, n.dtype)
                           if isinstance(n, Read) and n.tensor is t else None)
    first = min(state.stages.index(r) for r in readers)
    state.stages.insert(first, make_stage(copy_t, False, scope=step.scope))


def _cache_write(state: State, st: Stage) -> None:
    if st.combiner is None:
        raise ScheduleError(f"CacheWrite {st.name}: only a reduction stage has accumulators to cache")
    if st.rels or st.attach or st.inline or any(k != "serial" for k in st.kind.values()):
        raise ScheduleError(f"CacheWrite {st.name}: must come before any other step on the stage")
    old = st.tensor
    assert old.op is not None
    local_t = Tensor(f"{st.name}_local", old.shape, old.dtype, old.op)
    if state.stage_of(local_t) is not None or any(s.name == local_t.name for s in state.stages):
        raise ScheduleError(f"CacheWrite {st.name}: stage {local_t.name} already exists")
    axes = tuple(IterVar(Var(a.name), a.extent) for a in old.op.axes)
    copy_body = Read(local_t, tuple(a.var for a in axes), old.dtype)
    copy_t = Tensor(st.name, old.shape, old.dtype, ComputeOp(axes, copy_body, old.op.tag, old.op.attrs))
    local = make_stage(local_t, False, scope="global")
    local.body, local.raxes = st.body, st.raxes  # keep earlier Pack/Pad rewrites
    copy = make_stage(copy_t, st.is_output)
    idx = state.stages.index(st)
    state.stages[idx : idx + 1] = [local, copy]
    state.rewrite_reads(lambda n: Read(copy_t, n.indices, n.dtype) if n.tensor is old else None)


def _implicit_gemm(state: State, st: Stage) -> None:
    """Replace convolution stage `st` by its GEMM stages and a view (`autorelay.schedule.implicit_gemm`)."""
    what = f"ImplicitGemm {st.name}"
    if st.combiner != "sum":
        raise ScheduleError(f"{what}: only a sum reduction (a convolution) is a GEMM")
    if st.rels or st.attach or st.inline or any(k != "serial" for k in st.kind.values()):
        raise ScheduleError(f"{what}: must come before any other step on the stage")
    op = st.tensor.op
    assert op is not None
    found = conv_operands(st.body, op.attrs, st.axes, st.raxes)
    if isinstance(found, str):
        raise ScheduleError(f"{what}: {found}")
    parts = gemm_parts(st.name, st.tensor.shape, st.tensor.dtype, op, st.body, st.axes, st.raxes, *found)
    for t in (parts.wt, parts.col, parts.gemm):
        if any(s.name == t.name for s in state.stages) or t.name in state.inputs:
            raise ScheduleError(f"{what}: stage {t.name} already exists")
    old = st.tensor
    new = [make_stage(parts.wt, False, scope="shared"), make_stage(parts.col, False, scope="shared"),
           make_stage(parts.gemm, False), make_stage(parts.view, st.is_output)]
    idx = state.stages.index(st)
    state.stages[idx : idx + 1] = new
    state.rewrite_reads(lambda n: Read(parts.view, n.indices, n.dtype) if n.tensor is old else None)


def _pack(state: State, step: S.Pack) -> None:
    if step.tensor not in state.inputs:
        raise ScheduleError(f"Pack: {step.tensor!r} is not an input (inputs: {', '.join(state.inputs)})")
    t = state.inputs[step.tensor]
    nd = t.ndim
    if not 0 <= step.axis < nd or step.factor < 1:
        raise ScheduleError(
            f"Pack {t.name}: axis {step.axis} / factor {step.factor} invalid for shape {t.shape}"
        )
    pos = nd if step.position in (-1, nd) else step.position
    if not 0 <= pos <= nd:
        raise ScheduleError(f"Pack {t.name}: position {step.position} out of range for {nd + 1} dims")
    f = step.factor
    outer = list(t.shape)
    outer[step.axis] = -(-t.shape[step.axis] // f)
    shape = outer[:pos] + [f] + outer[pos:]
    nt = placeholder(shape, t.dtype, t.name)

    def fix(n: Read) -> Expr | None:
        if n.tensor is not t:
            return None
        idx = list(n.indices)
        ax = idx[step.axis]
        idx[step.axis] = ax // f
        idx = idx[:pos] + [ax % f] + idx[pos:]
        return Read(nt, tuple(idx), n.dtype)

    state.rewrite_reads(fix)
    state.inputs[t.name] = nt
    state.relayouts[t.name].append(("pack", step.axis, f, pos))


def _pad(state: State, st: Stage, step: S.Pad) -> None:
    v = st.leaf(step.axis)
    if st.combiner != "sum" or v not in st.is_reduce_var or v not in st.root_leaf.values():
        raise ScheduleError(
            f"Pad {st.name}.{step.axis}: only an unsplit reduction axis of a sum can be padded"
        )
    if step.multiple < 1:
        raise ScheduleError(f"Pad {st.name}.{step.axis}: multiple must be >= 1")
    ax = next(a for a in st.raxes if st.root_leaf[a.var] is v)
    new_ext = -(-ax.extent // step.multiple) * step.multiple
    if new_ext == ax.extent:
        return
    factors = _product_factors(st.body)
    uses: list[tuple[Read, int]] = []
    for n in walk(st.body):
        if isinstance(n, Read) and any(
            ax.var in {x for x in walk(i) if isinstance(x, Var)} for i in n.indices
        ):
            dims = [d for d, i in enumerate(n.indices) if i is ax.var]
            if (
                len(dims) != 1
                or n.tensor.name not in state.inputs
                or state.inputs[n.tensor.name] is not n.tensor
            ):
                raise ScheduleError(
                    f"Pad {st.name}.{step.axis}: every read indexed by it must be an input "
                    "indexed by the bare axis"
                )
            uses.append((n, dims[0]))
    if not any(n in factors for n, _ in uses):
        raise ScheduleError(f"Pad {st.name}.{step.axis}: the summand is not a product with a padded factor")
    for n, d in uses:
        t = n.tensor
        shape = list(t.shape)
        shape[d] = max(shape[d], new_ext)
        nt = placeholder(shape, t.dtype, t.name)
        state.rewrite_reads(lambda r, t=t, nt=nt: Read(nt, r.indices, r.dtype) if r.tensor is t else None)
        state.inputs[t.name] = nt
        state.relayouts[t.name].append(("pad", d, shape[d]))
    new_ax = IterVar(ax.var, new_ext, "reduce")
    st.raxes = [new_ax if a is ax else a for a in st.raxes]


def _product_factors(e: Expr) -> list[Expr]:
    if isinstance(e, Bin) and e.op == "mul":
        return _product_factors(e.a) + _product_factors(e.b)
    if isinstance(e, Cast):  # a widened zero is still zero (int8 operands summed in int32)
        return _product_factors(e.a)
    if isinstance(e, Call) and e.name == "bf16_to_f32":  # the bf16 word 0 is +0.0
        return _product_factors(e.args[0])
    return [e]
