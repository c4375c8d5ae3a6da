"""The quantization experiment: its stored accuracy is what an independent evaluation finds, its
plans name the right layers, and a tiny run writes CSV, Markdown and a figure and reruns for free."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from reproduce import Context, run_experiment
from reproduce.digits import CNN, RESNET, digits, trained
from reproduce.experiments import quantization
from reproduce.quant_measure import measure_digits, plan_for, quantize_digits_model


def test_stored_top1_matches_the_interpreter_on_the_held_out_set() -> None:
    """The unit's top-1 (compiled int8 model) equals top-1 of the reference interpreter's logits of
    the same quantized graph, counted here with NumPy against the labels; likewise fp32."""
    from autorelay.runtime.interpreter import evaluate
    from autorelay.transform import bind_params

    params = trained(CNN.name, 1, 0, 1)
    data = digits(CNN)
    row = measure_digits(CNN, params, data, "kl", "int8", threads=1, rounds=2)
    qmod, qparams = quantize_digits_model(CNN, params, data, "kl", "int8", len(data.x_test))
    logits = np.asarray(evaluate(bind_params(qmod, qparams), data.x_test))
    want = 100.0 * np.count_nonzero(logits.argmax(1) == data.y_test) / len(data.y_test)
    assert row["top1"] == pytest.approx(want)
    fmod = CNN.inference(len(data.x_test))
    f_logits = np.asarray(evaluate(bind_params(fmod, params), data.x_test))
    assert row["fp32_top1"] == pytest.approx(100.0 * np.mean(f_logits.argmax(1) == data.y_test))
    assert row["drop"] == pytest.approx(row["fp32_top1"] - row["top1"])
    assert row["test_images"] == len(data.y_test) == 360
    assert row["ms_p10"] <= row["ms"] <= row["ms_p90"] and row["fp32_ms"] > 0


def test_plans_keep_the_first_and_last_layers() -> None:
    layers = ["conv2d_0", "conv2d_1", "dense_0"]
    plan = plan_for("int8-ends-fp32", layers)
    assert [plan.precision(n) for n in layers] == ["fp32", "int8", "fp32"]
    assert [plan_for("int8-ends-bf16", layers).precision(n) for n in layers] == ["bf16", "int8", "bf16"]
    assert plan_for("bf16", layers).precision("conv2d_1") == "bf16"
    with pytest.raises(ValueError, match="unknown plan"):
        plan_for("int4", layers)
    from autorelay.transform.quantize import quantizable_layers

    assert quantizable_layers(RESNET.inference(1))[-1] == "dense_0"  # "last" is the classifier


def test_without_avx512_bf16_no_bf16_plan_is_listed(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    import reproduce.quant_measure as qm

    monkeypatch.setattr(qm, "bf16_available", lambda threads=None: False)
    keys = [u.key for u in quantization.EXPERIMENT.units(ctx)]
    assert keys and not any("bf16" in k for k in keys)
    assert "digits-cnn int8 max" in keys and "digits-cnn fp32 -" in keys
    monkeypatch.setattr(qm, "bf16_available", lambda threads=None: True)
    assert "digits-cnn bf16 -" in [u.key for u in quantization.EXPERIMENT.units(ctx)]


def test_a_tiny_run_writes_its_report_and_reruns_without_measuring(ctx: Context,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import reproduce.quant_measure as qm

    monkeypatch.setattr(quantization, "QUICK_EPOCHS", 1)
    monkeypatch.setattr(quantization, "METHODS", ("max",))
    monkeypatch.setattr(quantization, "QUICK_ROUNDS", 2)
    monkeypatch.setattr(qm, "PLANS", ("int8", "fp32"))
    first = run_experiment(quantization.EXPERIMENT, ctx)
    assert first.measured == ["digits-cnn int8 max", "digits-cnn fp32 -"] and not first.failed
    names = {p.name for p in first.files}
    assert names == {"quantization.csv", "quantization.md", "quantization_digits-cnn.png"}
    with (ctx.out_dir / "quantization.csv").open() as f:
        rows = {r["unit"]: r for r in csv.DictReader(f)}
    fp32 = rows["digits-cnn fp32 -"]
    assert float(fp32["top1"]) == pytest.approx(float(fp32["fp32_top1"])) and float(fp32["top1"]) > 50
    md = (ctx.out_dir / "quantization.md").read_text()
    assert "| int8 | max |" in md and "held-out digits" in md
    again = run_experiment(quantization.EXPERIMENT, ctx)
    assert not again.measured and sorted(again.reused) == sorted(first.measured)
