"""The vta experiment: virtual threads hide load latency on a layer whose loads can overlap (both
runs bit-exact against the integer reference), the layer list is the network's, and a run from
the layer units writes its report and reruns without measuring."""

from __future__ import annotations

from collections import Counter

import pytest

from autorelay.vta import VTAConfig
from autorelay.vta.conv import ConvShape, conv_space
from reproduce import Context, run_experiment
from reproduce.experiments import vta
from reproduce.vta_measure import largest_knobs, measure_layer, resnet18_convs

pytestmark = pytest.mark.vta


def test_two_virtual_threads_take_fewer_cycles_and_stay_bit_exact() -> None:
    shape = ConvShape(128, 14, 14, 128, 3, 3, 1, 1)  # a 3x3 layer with several input chunks to load
    row = measure_layer(shape, VTAConfig())
    assert row["v1_exact"] is True and row["v2_exact"] is True and row["v1_same_exact"] is True
    assert row["clipped"] < 0.7  # most outputs are sums, not clipped values: the comparison means something
    assert "vthreads=2," in row["v2_knobs"] and "vthreads=1," in row["v1_knobs"]
    assert row["v2_cycles"] <= row["v1_cycles"]
    assert row["v2_cycles"] < row["v1_same_cycles"]  # the same tile without overlap is slower
    assert row["v2_util"] > row["v1_same_util"]
    # with one thread, loads and GEMMs never overlap: the busy cycles add up to about the total
    busy = sum(v for k, v in row.items() if k.startswith("v1_same_busy_"))
    assert busy >= 0.95 * row["v1_same_cycles"]


def test_default_knobs_are_the_largest_tile_per_thread_count() -> None:
    from autorelay.vta.tasks import default_conv_knobs

    shape, hw = ConvShape(64, 14, 14, 64, 3, 3, 1, 1), VTAConfig()
    space = conv_space(shape, hw)
    assert largest_knobs(space, 1) == default_conv_knobs(shape, hw)
    assert largest_knobs(space, 2) in space and largest_knobs(space, 2).vthreads == 2


def test_the_layer_list_is_what_the_partitioner_offloads() -> None:
    """resnet18_convs (from the architecture) against the layers the vta build of ResNet-18 really
    offloads: the same shapes, except the last 3x3 conv, which stays on the CPU (read in float).
    At 64 pixels, where every kernel tap of the last stage's 2x2 maps reads the input (at 32, its
    3x3 convolutions on 1x1 maps read it with the centre tap only, and run as 1x1 ones)."""
    import autorelay
    from autorelay.transform.quantize import calibrate, quantize_model
    from search.models import load_model
    from search.quant_data import random_batches

    model = load_model("resnet-18", image_size=64)
    cal = calibrate(model.mod, model.params, random_batches(model, 1).batches, method="max", progress=False)
    qmod, qparams = quantize_model(model.mod, model.params, cal, scheme="vta")
    exe = autorelay.build(qmod, "vta", params=qparams, threads=1)
    got = Counter(layer.name for layer in exe.vta_layers)
    want = Counter({f"vta_conv2d_{s.c}x{s.h}x{s.w}_{s.o}k{s.kh}s{s.stride}": n
                    for s, n in resnet18_convs(64)})
    assert want - got == Counter({"vta_conv2d_512x2x2_512k3s1": 1}) and not got - want


def test_layer_units_report_and_rerun_without_measuring(ctx: Context,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vta, "QUICK_IMAGE", 32)
    monkeypatch.setattr(vta, "E2E", False)
    first = run_experiment(vta.EXPERIMENT, ctx)
    assert len(first.measured) == len(resnet18_convs(32)) and not first.failed
    assert {p.name for p in first.files} == {"vta.csv", "vta.md", "vta_utilisation.png"}
    md = (ctx.out_dir / "vta.md").read_text()
    assert "| 64x8x8->64 k3s1 | 4 |" in md and "| NO |" not in md
    again = run_experiment(vta.EXPERIMENT, ctx)
    assert not again.measured and len(again.reused) == len(first.measured)
