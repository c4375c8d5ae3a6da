"""Compiling the kernels of a search's model builds ahead, in worker processes.

The layout search and the screening of `--pipeline plan` build ResNet-18 four times each (one
build per uniform layout), and a build compiles its kernels one after another in the tuner's
process: scheduling a kernel and emitting its LLVM IR is Python work of 0.1-3 s per kernel, about
a minute for the four builds, with the other cores idle. `prefetch_kernels` collects what the
builds will compile (`autorelay.primitive.kernel_request`: the same schedule choice the build
makes), compiles each distinct kernel once on a pool of `workers` processes (the objects land in a
scratch cache, so loading them here skips LLVM's optimiser too) and files them in the builds'
`KernelMemo`; the builds then find them there. A kernel a worker could not compile is left to the
build, which compiles it itself and reports what went wrong as it always does.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from typing import Any

from autorelay.graph_builder import graph_buffer_plans
from autorelay.ir.module import IRModule
from autorelay.kernel import load_kernel
from autorelay.lower import workload_key
from autorelay.primitive import KernelMemo, kernel_request
from autorelay.runtime.views import is_view_function
from autorelay.target import Target
from autorelay.te.halo import DENSE
from autorelay.utils.deep import deep
from search.extract import primitive_call_sites
from search.measure.jobs import emit_job
from search.measure.workers import WorkerPool

EMIT_TIMEOUT_S = 600.0  # one kernel's emission: a hung worker is killed and the build compiles it


def prefetch_kernels(memo: KernelMemo, builds: Sequence[tuple[IRModule, Any]], target: Target,
                     workers: int) -> int:
    """Compile, `workers` at a time, the kernels that building each prepared module of `builds`
    (with its schedule source, None: defaults) will need and `memo` lacks; returns how many were
    filed. `workers` < 2: nothing is done (each build compiles its own kernels in turn)."""
    if workers < 2:
        return 0
    requests = _requests(memo, builds, target)
    if len(requests) < 2:
        return 0
    pool = WorkerPool(min(workers, len(requests)), "autorelay-emit")
    filed = 0
    with tempfile.TemporaryDirectory(prefix="autorelay-prefetch-") as cache:
        try:
            jobs = [(cdefs, config, target, cache) for cdefs, config in requests.values()]
            outcomes = pool.map(emit_job, jobs, EMIT_TIMEOUT_S)
        finally:
            pool.close()
        for (key, (cdefs, _)), out in zip(requests.items(), outcomes):
            if out.status == "ok" and out.value is not None:
                codes = [dataclasses.replace(code, cdef=cdef) for code, cdef in zip(out.value, cdefs)]
                memo.add(key, tuple(load_kernel(code, cache) for code in codes))
                filed += 1
    return filed


@deep  # one hop to a big-stack thread for all the walks (see `autorelay.build_module.build_prepared`)
def _requests(memo: KernelMemo, builds: Sequence[tuple[IRModule, Any]], target: Target
              ) -> dict[tuple, tuple[list, Any]]:
    """The kernels the builds need that `memo` lacks: memo key -> (computes, config)."""
    requests: dict[tuple, tuple[list, Any]] = {}
    asked: set[tuple] = set()  # (source, workload, buffers): a build compiles each once
    for module, source in builds:
        plans = graph_buffer_plans(module, target)
        for site in primitive_call_sites(module):
            fn = site.op
            if is_view_function(fn):  # type: ignore[arg-type]  # the graph executor runs no kernel for a view
                continue
            buffers = plans.get(id(site), DENSE)
            workload = (id(source), workload_key(fn), buffers)
            if workload in asked:
                continue
            asked.add(workload)
            req = kernel_request(fn, source, target, split_outputs=True, buffers=buffers)  # as the build
            if req is not None and req[0] not in memo.kernels and req[0] not in requests:
                requests[req[0]] = (req[1], req[2])
    return requests


__all__ = ["prefetch_kernels"]
