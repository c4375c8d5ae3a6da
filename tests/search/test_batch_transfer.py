"""A config transferred from a workload of another batch (`Template.carries_across_batch`): where
its batch knobs (a weight pass's rows, Winograd's fused unit) are not what this batch's default
chooses, the build refuses it and says why; where they are, or the donor ran at the same batch, it
is transferred as before. Oracle: the default-schedule build of the same model (same inputs)."""

from __future__ import annotations

import numpy as np
import pytest

import tuning_db
from autorelay.schedule.space import Config
from autorelay.schedule.templates import templates
from search.extract import BoundSource
from search.models import build_model, load_model, prepare_model, run_inputs

pytestmark = pytest.mark.cpu

TEMPLATES = ("conv2d_nchwc", "conv2d_winograd_nchwc")


@pytest.fixture(scope="module")
def batches():
    """ResNet-18 at 112 pixels (its 28-pixel layers run as Winograd) at batch 1 and batch 2, in
    blocks of 8, for one thread."""
    out = {}
    for batch in (1, 2):
        model = load_model("resnet-18", image_size=112, batch_size=batch)
        out[batch] = model, prepare_model(model, "llvm", threads=1, pipeline="nchwc")
    return out


def _twins(batches, template: str):
    """A task of `template` at batch 1 whose batch knob offers a value that its batch-2 twin (same
    shapes but the leading one) does not default to, with that twin and the value."""
    knob = templates()[template].batch_knobs[0]
    twos = [t for t in batches[2][1].extraction.tasks if t.template == template]
    for one in (t for t in batches[1][1].extraction.tasks if t.template == template):
        shapes = [s[1:] for s in one.workload["shapes"]]
        for two in twos:
            if [s[1:] for s in two.workload["shapes"]] != shapes:
                continue
            others = [v for v in one.space.knob(knob).values if v != two.default[knob]]
            if others:
                return one, two, knob, others[0]
    pytest.skip(f"no {template} layer of this model offers a second {knob}")


def _with(config: Config, knob: str, value) -> Config:
    return Config(config.template, tuple((k, value if k == knob else v) for k, v in config.values))


def _build(batches, batch: int, db):
    model, prepared = batches[batch]
    src = BoundSource(db, str(prepared.target), prepared.extraction.tasks)
    return model, build_model(model, src, prepared=prepared)


@pytest.mark.parametrize("template", TEMPLATES)
def test_a_config_tuned_at_another_batch_for_another_unit_is_not_transferred(tmp_path, batches, template):
    one, two, knob, other = _twins(batches, template)
    refused = _with(one.default, knob, other)
    carried = _with(one.default, knob, two.default[knob])
    assert one.space.index(carried) >= 0  # the batch-2 default is a point of the donor's space too
    for name, config, want in (("refused", refused, "default"), ("carried", carried, "transferred")):
        with tuning_db.open(f"sqlite:///{tmp_path / name}.db") as db:
            db.record(one.key, str(one.target), config.to_json(), [1e-4], workload=one.workload)
            model, exe = _build(batches, 2, db)
        (row,) = {r.workload_key: r for r in exe.report.rows if r.workload_key == two.key}.values()
        assert row.source == want, (name, row.detail)
        assert ("not transferred: tuned at batch 1" in row.detail) == (want == "default"), row.detail
        default = build_model(model, None, prepared=batches[2][1])
        args = run_inputs(default, model)
        np.testing.assert_allclose(exe(*args), default(*args), rtol=1e-4, atol=1e-4)


def test_a_donor_of_the_same_batch_transfers_whatever_its_unit(tmp_path, batches):
    """Batch 1 to batch 1 (another layer): the batch knobs carry as tuned."""
    one, _, knob, other = _twins(batches, "conv2d_nchwc")
    config = _with(one.default, knob, other)
    with tuning_db.open(f"sqlite:///{tmp_path / 'log.db'}") as db:
        db.record(one.key, str(one.target), config.to_json(), [1e-4], workload=one.workload)
        _, exe = _build(batches, 1, db)
    rows = [r for r in exe.report.rows if r.source == "transferred"]
    assert rows and not any("not transferred" in r.detail for r in exe.report.rows)
