"""VTA latency hiding and offload: per ResNet-18 offloaded convolution, the simulated accelerator's
cycles and GEMM-core utilisation with one and two virtual threads; and ResNet-18 end to end with the
offloadable convolutions on the accelerator, bit-exact against the CPU's integer path, its
accelerator time at the configured clock beside the CPU's time in the same layers.

One unit per distinct convolution shape (a functional + cycle simulation of three knob settings,
each output checked against the integer reference) and one for the whole network. `--quick` uses
a reduced input image (fewer pixels per layer, the same layer structure) and one input image.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import astuple
from typing import Any

from reproduce.experiment import Context, Experiment, Report, Row, Unit
from reproduce.output import md_table

QUICK_IMAGE, FULL_IMAGE = 112, 224  # ResNet-18 input side: the layers' sizes scale with it
QUICK_INPUTS, FULL_INPUTS = 1, 5  # images run end to end and compared bit for bit
E2E = True  # the end-to-end unit (a test may leave it out: the CPU build takes tens of seconds)


def _units(ctx: Context) -> list[Unit]:
    from reproduce.vta_measure import layer_name, resnet18_convs

    image = QUICK_IMAGE if ctx.quick else FULL_IMAGE
    units = [Unit(f"layer {layer_name(s)}", {"shape": list(astuple(s)), "count": n, "image": image},
                  expected_s=2.0 * s.oh * s.ow * s.o * s.c * s.kh * s.kw / 1e8 + 0.3)
             for s, n in resnet18_convs(image)]
    if E2E:
        inputs = QUICK_INPUTS if ctx.quick else FULL_INPUTS
        units.append(Unit(f"resnet-18 e2e {image}px", {"image": image, "inputs": inputs},
                          expected_s=40.0 * (image / 224) ** 2 + 10.0 * inputs * (image / 224) ** 2 + 20))
    return units


def _measure(ctx: Context, unit: Unit) -> Mapping[str, Any]:
    from autorelay.vta import VTAConfig
    from autorelay.vta.conv import ConvShape
    from reproduce.vta_measure import measure_layer, measure_resnet18

    hw = VTAConfig()
    if "shape" in unit.params:
        row = measure_layer(ConvShape(*unit.params["shape"]), hw, seed=ctx.seed)
        row.update(count=unit.params["count"], image=unit.params["image"])
        bad = [k for k in ("v1_exact", "v2_exact", "v1_same_exact") if row.get(k) is False]
        if bad:
            raise AssertionError(f"{row['layer']}: output differs from the integer reference "
                                 f"({', '.join(bad)})")
        return row
    row = measure_resnet18(image=unit.params["image"], inputs=unit.params["inputs"], threads=ctx.threads,
                           db=ctx.db, repeat=2 if ctx.quick else 10, hw=hw, seed=ctx.seed)
    ctx.note(f"bit-exact on {row['exact']} of {row['inputs']} inputs; accelerator {row['acc_ms']:.2f} ms "
             f"vs CPU {row['cpu_offloaded_ms']:.2f} ms on the offloaded layers")
    return row


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else None


def _layer_table(layers: Sequence[Row]) -> str:
    body = []
    for r in layers:
        x = r.result
        exact = all(x.get(k) is not False for k in ("v1_exact", "v2_exact", "v1_same_exact"))
        body.append([x["layer"], x["count"], x["v1_cycles"], x["v1_util"], x.get("v2_cycles"),
                     x.get("v2_util"), x.get("v1_same_cycles"), _ratio(x["v1_cycles"], x.get("v2_cycles")),
                     _ratio(x.get("v1_same_cycles"), x.get("v2_cycles")), "yes" if exact else "NO"])
    table = md_table(["layer", "count", "cycles, 1 thread", "util", "cycles, 2 threads", "util",
                      "2-thread tile on 1 thread", "speed-up (knob flip)", "speed-up (overlap alone)",
                      "bit-exact"], body)
    tot = {k: sum(r.result.get(f"{k}_cycles") or 0 for r in layers for _ in range(r.result["count"]))
           for k in ("v1", "v2")}
    useful = {k: sum((r.result.get(f"{k}_util") or 0) * (r.result.get(f"{k}_cycles") or 0)
                     * r.result["count"] for r in layers) for k in ("v1", "v2")}
    clock = layers[0].result["clock_mhz"]
    summary = (f"\nAll offloaded convolutions, counted as often as the network runs them: "
               f"{tot['v1']} cycles with 1 thread (utilisation {useful['v1'] / max(1, tot['v1']):.2f}), "
               f"{tot['v2']} with 2 (utilisation {useful['v2'] / max(1, tot['v2']):.2f}); "
               f"{tot['v1'] / max(1, tot['v2']):.2f}x; "
               f"{tot['v2'] / (clock * 1e3):.2f} ms at {clock:g} MHz.\n")
    return table + "\n" + summary


def _e2e_table(rows: Sequence[Row]) -> str:
    body = [[f"{x['image']}px", f"{x['exact']} of {x['inputs']}", x["offloaded"], x["acc_ms"], x["acc_util"],
             x["cpu_offloaded_ms"], _ratio(x["cpu_offloaded_ms"], x["acc_ms"]), x["vta_cpu_rest_ms"],
             x["cpu_total_ms"], ", ".join(x["knob_sources"])] for x in (r.result for r in rows)]
    return md_table(["image", "bit-exact", "layers offloaded", "accelerator ms (at clock)", "GEMM util",
                     "CPU ms, same layers", "accelerator speed-up", "CPU ms left in the vta build",
                     "CPU-only ms", "knobs"], body)


def _report(ctx: Context, rows: Sequence[Row]) -> Report:
    layers = sorted((r for r in rows if "v1_cycles" in r.result), key=lambda r: r.unit)
    e2e = [r for r in rows if "acc_cycles" in r.result]
    order = {name: i for i, name in enumerate(u.key for u in _units(ctx))}
    layers.sort(key=lambda r: order.get(r.unit, len(order)))
    csv_rows = [{"unit": r.unit, "machine": r.machine, **{k: v for k, v in r.result.items() if k != "layers"}}
                for r in [*layers, *e2e]]
    parts = []
    if layers:
        parts += ["## Latency hiding: one vs two virtual threads per layer", "",
                  "Default knobs: the largest tile that fits (most reuse per load). Two threads halve the "
                  "buffers each tile may use, so the two-thread knobs have a smaller tile; the column "
                  "'2-thread tile on 1 thread' runs that tile without the overlap. Simulated cycles; "
                  "every run's output compared with the integer reference.", "", _layer_table(layers)]
    if e2e:
        parts += ["## ResNet-18 offload, end to end", "",
                  f"int8 (accelerator scheme), batch 1, {ctx.threads} CPU threads. Accelerator time: the "
                  "simulated cycles of the offloaded layers at the clock; CPU time: the CPU-only build's "
                  "kernels for the same layers (profiled). The partitioner keeps the network's last 3x3 "
                  "convolution on the CPU (its output is read in float), so the build offloads one "
                  "convolution fewer than the layer table counts.", "", _e2e_table(e2e)]
    figures = {"vta_utilisation": lambda fig: _draw(fig, layers)} if layers else {}
    return Report(csv_rows, "\n".join(parts) + "\n", figures)


def _draw(fig: Any, layers: Sequence[Row]) -> None:
    ax = fig.add_subplot()
    n = len(layers)
    series = [("v1", "1 thread (default knobs)"), ("v1_same", "1 thread, 2-thread tile"), ("v2", "2 threads")]
    for k, (key, label) in enumerate(series):
        ax.bar([i + 0.27 * k for i in range(n)], [r.result.get(f"{key}_util") or 0 for r in layers],
               width=0.27, label=label)
    ax.set_xticks([i + 0.27 for i in range(n)], [r.result["layer"] for r in layers], rotation=40, ha="right",
                  fontsize=7)
    ax.set_ylabel("GEMM-core utilisation")
    ax.set_ylim(0, 1)
    ax.set_title("Virtual threads on the simulated accelerator (ResNet-18 convolutions)")
    ax.legend(fontsize=8)


EXPERIMENT = Experiment(
    name="vta",
    title="VTA latency hiding and ResNet-18 offload",
    reference="TVM (Chen et al., OSDI 2018) Sec. 4.4 latency hiding, Fig. 10, and Sec. 6.4 VTA offload, "
              "Fig. 21; VTA (Moreau et al., IEEE Micro 2019) Sec. 5, Fig. 8",
    quick_minutes=1.0,
    full_minutes=3.0,
    units=_units,
    measure=_measure,
    report=_report,
)
