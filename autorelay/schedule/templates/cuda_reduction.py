"""`cuda_reduction`: the GPU template for every reduction without a template of its own (softmax,
pooling, sum/mean/max/min over axes, depthwise and grouped convolutions).

Injective producers are inlined; every reduction stage and the output is its own kernel. A
reduction stage is computed in one of two forms, chosen by the knob `reduce_threads`:

* 0 — serial: its output elements are spread over blocks and threads as in `cuda_injective`
  (`threads` per block), each thread reducing its element alone. Best when there are enough
  outputs to fill the GPU and each reduction is short.
* T in 32..1024 — cross-thread (`steps.CrossThreadReduce`): one block of T threads per output
  element, each thread folding a strided slice, then warp shuffles within each warp of the
  target's warp size and one shared-memory exchange of the per-warp partials (see
  `autorelay.schedule.cross_thread`). Best for few outputs and long reductions: softmax over 1000
  classes at batch 1 (one thread walking 1000 elements twice), global average pooling, a sum over a
  long axis.

Non-reduction stages other than the output (a softmax's exp, a pad) are inlined; the output, when
it is not itself a reduction (softmax's normalisation, the division of a mean), is an injective
kernel with `threads` per block. Each reduction stage is a kernel of its own, so a later stage
reads a row statistic from global memory in the next kernel.

The default takes the cross-thread form when the longest reduction has at least 32 points (one
warp's worth, so no thread idles in the first fold) and the outputs are few relative to a big GPU
(fewer than a quarter of the threads its multiprocessors hold, 2048 each): then one thread per
output leaves most
of the GPU idle. T grows from 32 while every thread keeps at least one point to fold, the blocks
stay within that GPU's resident threads, and T <= 512.
"""

from __future__ import annotations

import math

from autorelay.codegen.nvptx.device import SM_THREADS
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, register
from autorelay.schedule.templates.cuda import check_threads, max_threads, threads_knob
from autorelay.schedule.templates.generic import _outer_fuse
from autorelay.target import Target
from autorelay.te.expr import Reduce
from autorelay.te.tensor import ComputeDef, Tensor, topo_order

REDUCE_THREADS = (0, 32, 64, 128, 256, 512, 1024)


def _reductions(cdef: ComputeDef) -> list[Tensor]:
    return [t for t in topo_order([cdef.output]) if t.op is not None and isinstance(t.op.body, Reduce)]


def default_reduce_threads(n_out: int, k: int, top: int, multiprocessors: int) -> int:
    """Threads per output element for `n_out` outputs each reducing `k` points (0: serial), on a
    GPU of `multiprocessors` with blocks of at most `top` threads."""
    resident = multiprocessors * SM_THREADS
    if k < 32 or n_out * 4 >= resident:
        return 0
    t = 32
    while t * 2 <= min(k, 512, top) and n_out * t * 2 <= resident:
        t *= 2
    return t


class CudaReductionTemplate(Template):
    name = "cuda_reduction"
    kind = "cuda"

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        block = [t for t in REDUCE_THREADS if t <= max_threads(target)]
        return Space(self.name, (threads_knob(target), Knob("reduce_threads", block)))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        longest = max(_reductions(cdef), key=lambda t: math.prod(a.extent for a in t.op.reduce_axes),
                      default=None)
        rt = 0
        if longest is not None and longest.op is not None:
            k = math.prod(a.extent for a in longest.op.reduce_axes)
            rt = default_reduce_threads(math.prod(longest.shape), k, max_threads(target),
                                        target.multiprocessors)
        return Config(self.name, (("threads", min(128, max_threads(target))), ("reduce_threads", rt)))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        threads, rt = config["threads"], config["reduce_threads"]
        for n in (threads, rt):
            check_threads(self.name, n, target)
        out = cdef.output
        steps: list[S.Step] = []
        for t in (t for t in topo_order([out]) if t.op is not None):
            is_red = isinstance(t.op.body, Reduce)  # type: ignore[union-attr]
            if t is not out and not is_red:
                steps.append(S.ComputeInline(t.name))
                continue
            if is_red and rt:
                steps.append(S.CrossThreadReduce(t.name, rt, target.warp_size))
                continue
            axes = [a.name for a in t.op.axes]  # type: ignore[union-attr]
            if not axes:
                continue  # a scalar result: one thread
            fs, ax = _outer_fuse(t.name, axes)
            assert ax is not None
            steps += [*fs, S.Split(t.name, ax, threads, f"{ax}.b", f"{ax}.t"),
                      S.Bind(t.name, f"{ax}.b", "blockIdx.x"), S.Bind(t.name, f"{ax}.t", "threadIdx.x")]
        return tuple(steps)


register(CudaReductionTemplate())
