"""Property: any legal config of a template computes the right answer.

For every case, configs are drawn at random (seeded, so a failure reproduces) from the template's
space; each must either raise ScheduleError (an illegal point the tuner skips) or match the
oracle. Shapes are ragged, so tails, guards and padding are exercised.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from kernel_cases import CASES, inputs_for

from autorelay.codegen.llvm.host import host_target
from autorelay.errors import ScheduleError
from autorelay.kernel import compile_kernel
from autorelay.schedule.templates import template_for

pytestmark = pytest.mark.cpu
SAMPLES = 4


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_random_configs_match_oracle(case):
    cdef = case.build()
    target = host_target(threads=2)
    tmpl = template_for(cdef)
    space = tmpl.space(cdef, target)
    rng = random.Random(f"{case.name}-{space.size}")
    arrays = inputs_for(cdef, seed=1)
    expect = case.oracle(*arrays)
    legal = 0
    for index in rng.sample(range(space.size), min(SAMPLES, space.size)):
        cfg = space.get(index)
        assert space.index(cfg) == index
        try:
            kernel = compile_kernel(cdef, cfg, target)
        except ScheduleError:
            continue
        legal += 1
        got = kernel.run(*arrays)
        np.testing.assert_allclose(
            got, expect, rtol=case.rtol, atol=case.rtol, err_msg=f"config {cfg.as_dict()}"
        )
    assert legal > 0, "no sampled config was legal"
