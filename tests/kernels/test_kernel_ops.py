"""Every pattern compiles and matches its NumPy oracle under the template's default config, on
ragged shapes, with one and two threads."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import CASES, inputs_for

from autorelay.codegen.llvm.host import host_target
from autorelay.kernel import compile_kernel
from autorelay.schedule.templates import template_for

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_default_config_matches_oracle(case):
    cdef = case.build()
    assert template_for(cdef).name == case.template
    arrays = inputs_for(cdef)
    expect = case.oracle(*arrays)
    got = compile_kernel(cdef, None, host_target(threads=2)).run(*arrays)
    assert got.shape == expect.shape
    np.testing.assert_allclose(got, expect, rtol=case.rtol, atol=case.rtol)


def test_threads_do_not_change_the_answer():
    cdef = CASES[0].build()
    arrays = inputs_for(cdef, seed=3)
    one = compile_kernel(cdef, None, host_target(threads=1)).run(*arrays)
    two = compile_kernel(cdef, None, host_target(threads=2)).run(*arrays)
    np.testing.assert_array_equal(one, two)
