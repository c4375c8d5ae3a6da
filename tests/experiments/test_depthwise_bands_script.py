"""The depthwise-band experiment: its four builds of a small MobileNet-v2 compute the same output,
and its per-pair table matches each banded kernel with the two kernels it replaces."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from experiment_scripts import load_script

pytestmark = pytest.mark.cpu

db = load_script("depthwise_bands")


def test_the_four_builds_agree(monkeypatch):
    from search import models

    small = models.load_model
    monkeypatch.setattr(db, "load_model", partial(small, image_size=64))
    call, want = db.build("mobilenet-v2", 8, 1, "relay", 8, None)
    np.testing.assert_allclose(np.asarray(call()), want)
    banded = {}
    for w in db.FUSIONS[1:]:
        exe, args = db.built("mobilenet-v2", 8, 1, w, 8, None)
        np.testing.assert_allclose(np.asarray(exe(*args)), want, rtol=1e-4, atol=1e-5)
        banded[w] = [r.name.count("conv2d") for r in exe.profile(*args, repeat=1).rows]
    # at 64 px the maps of fewer than 8 rows keep their pairs apart in the third build; the fourth
    # takes each of its bands' expansions in
    assert banded["bands"].count(2) == 17 and 0 < banded["bands on larger maps"].count(2) < 17
    expanded = banded["bands on larger maps+expansions"]
    assert 2 not in expanded and expanded.count(3) == banded["bands on larger maps"].count(2)


def test_pair_rows_match_each_band_with_its_two_kernels():
    relay = [("layout_transform", 1.0), ("conv2d_add_clip", 2.0), ("conv2d_add", 3.0), ("dense", 4.0)]
    banded = [("layout_transform", 1.0), ("conv2d_add_clip_conv2d_add", 4.0), ("dense", 4.0)]
    assert db.pair_rows(relay, banded) == [("conv2d_add_clip_conv2d_add", 4.0, 5.0)]
