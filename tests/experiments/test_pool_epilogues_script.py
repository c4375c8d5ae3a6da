"""The pooling-epilogue experiment's worker factories: both builds of a layer (and of a small
model) compute the same output, which the layer's fused build gets from one kernel."""

from __future__ import annotations

import numpy as np
import pytest
from experiment_scripts import load_script

pytestmark = pytest.mark.cpu

pe = load_script("pool_epilogues")


@pytest.mark.parametrize("winograd", [0, 4])
def test_layer_builds_agree(winograd):
    (_, relay), (call, pooled) = (pe.build_layer(32, 12, 16, winograd, 1, fused) for fused in (False, True))
    assert relay.shape == (1, 32, 6, 6)
    np.testing.assert_allclose(pooled, relay, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(call()), relay, rtol=1e-4, atol=1e-4)


def test_a_table_row_names_a_failed_build():
    class Failed:
        error = "ScheduleError: no"

    assert "ScheduleError" in pe._row("m", {"relay": Failed(), "pooled": Failed()}, 1)
