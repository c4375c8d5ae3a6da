"""`build(mod, target="vta")`: a quantized model split between the CPU and the accelerator.

    qmod, qparams = quantize_model(mod, params, calibration, scheme="vta")
    exe = autorelay.build(qmod, target="vta", params=qparams, schedules=source)
    out = exe(x)                    # CPU kernels and simulated accelerator layers, in graph order
    exe.partition                   # which int8 layers run where, and why
    exe.accelerator_time()          # simulated cycles / seconds / GEMM utilisation of the last call

The target text is ``vta`` (the default hardware, `VTAConfig()`) or ``vta -config=hw.json``; the
rest of the model is compiled for the host CPU (``-threads=`` sets its threads). The weights are
bound first (the partitioner needs them as constants), the offloadable layers become `vta.*` calls
(`autorelay.vta.partition`), the pipeline runs on the rest (`default` unless given: it fuses
nothing into the opaque `vta.*` calls), and the graph executor runs every `vta.*` call through a
`VTALayer` — so the executor moves data between the CPU's buffers and the accelerator's DRAM image.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autorelay.ir.expr import Function
from autorelay.ir.module import IRModule
from autorelay.runtime.fallback import op_names
from autorelay.schedule.source import ScheduleSource
from autorelay.target import Target, TargetError, TargetSpec
from autorelay.transform.bind import bind_params
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.prepare import prepare
from autorelay.vta.config import VTAConfig, VTAConfigError
from autorelay.vta.ops import OFFLOADED_OPS
from autorelay.vta.partition import partition
from autorelay.vta.runtime import VTALayer, accelerator_time, make_layer


def hardware_of(spec: TargetSpec) -> VTAConfig:
    """The accelerator a ``vta`` target names: `-config=FILE` (JSON of `VTAConfig` fields), else
    the default configuration."""
    unknown = sorted(k for k, _ in spec.options if k != "config")
    if unknown:
        raise TargetError(f"vta target: unknown option(s) {', '.join('-' + k for k in unknown)}; "
                          f"known: -config=FILE")
    path = dict(spec.options).get("config")
    if path is None:
        return VTAConfig()
    try:
        return VTAConfig.from_json(Path(path).read_text())
    except OSError as e:
        raise TargetError(f"vta target: cannot read -config={path}: {e.strerror}") from None
    except (ValueError, TypeError, VTAConfigError) as e:
        raise TargetError(f"vta target: -config={path}: {e}") from None


class _Offloader:
    """The graph builder's hook: a `VTALayer` for every primitive function that is one vta call."""

    def __init__(self, hw: VTAConfig, schedules: ScheduleSource | None) -> None:
        self.hw, self.schedules = hw, schedules
        self.layers: list[VTALayer] = []

    def __call__(self, fn: Function) -> VTALayer | None:
        names = op_names(fn)
        if not any(n in OFFLOADED_OPS for n in names):
            return None
        layer = make_layer(fn, self.hw, self.schedules)
        self.layers.append(layer)
        return layer


def build_vta(mod: IRModule, hw: VTAConfig, host: Target, params: Mapping[str, np.ndarray] | None = None,
              schedules: ScheduleSource | None = None, pipeline: str | Pipeline | None = None,
              device_schedules: ScheduleSource | None = None) -> Any:
    """The executable of `mod` with its offloadable layers on the accelerator `hw` and the rest
    compiled for `host` (see the module docstring). `schedules`: the host kernels' source;
    `device_schedules`: the offloaded layers' (a log's source for `vta_target(hw)`)."""
    from autorelay.build_module import build_prepared, check_dataflow

    check_dataflow(mod)
    bound = bind_params(mod, params) if params else mod
    parted, report = partition(bound, hw)
    offloader = _Offloader(hw, device_schedules)
    exe = build_prepared(prepare(parted, None, pipeline or "default"), host, schedules, offload=offloader)
    exe.pipeline = pipeline if isinstance(pipeline, str) else "default" if pipeline is None else "custom"
    exe.partition = report
    exe.vta_layers = offloader.layers
    exe.accelerator = hw
    exe.accelerator_time = lambda: accelerator_time(offloader.layers)
    return exe


def build_for_accelerator(mod: IRModule, spec: TargetSpec, params: Mapping[str, np.ndarray] | None,
                          schedules: ScheduleSource | None, pipeline: str | Pipeline | None, *,
                          threads: int | None, executor: str, shapes: Mapping[str, Sequence[int]] | None,
                          device_schedules: ScheduleSource | None = None) -> Any:
    """`autorelay.build` for a ``vta`` target: static dataflow graphs on the graph executor."""
    from autorelay.build_module import BuildError
    from autorelay.codegen import resolve_target
    from autorelay.transform.bind_shapes import bind_shapes, dynamic_inputs

    if executor not in ("auto", "graph"):
        raise BuildError(f"build: the vta target runs on the graph executor, not {executor!r}")
    if shapes:
        mod = bind_shapes(mod, shapes)
    elif dynamic_inputs(mod):
        names = ", ".join(sorted(dynamic_inputs(mod)))
        raise BuildError(f"build: the vta target needs static input shapes; {names} "
                         f"{'is' if ',' not in names else 'are'} dynamic: pass shapes={{...}}")
    host = resolve_target("llvm", threads)
    return build_vta(mod, hardware_of(spec), host, params, schedules, pipeline, device_schedules)


__all__ = ["build_for_accelerator", "build_vta", "hardware_of"]
