"""Kernels through the CUDA driver: run on a GPU where one exists, skip with the reason here."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_cases import CASES, inputs

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx.driver import NO_DRIVER, CudaDriverError, _load_library, open_driver
from autorelay.kernel import emit_kernel, load_kernel


def _driver_or_reason() -> str | None:
    try:
        open_driver()
    except CudaDriverError as e:
        return str(e)
    return None


REASON = _driver_or_reason()


def test_missing_driver_is_one_clear_error():
    try:
        _load_library()
    except CudaDriverError as e:
        assert str(e).startswith(NO_DRIVER)
        with pytest.raises(CudaDriverError, match=NO_DRIVER):
            open_driver()
    else:
        pytest.skip("libcuda is present on this machine")


@pytest.mark.cuda
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_kernel_matches_numpy_on_the_device(case):
    cdef, ref = CASES[case]()
    code = emit_kernel(cdef, None, resolve_target("cuda"))
    kernel = load_kernel(code)
    xs = inputs(cdef)
    outs = [np.zeros(b.shape, b.dtype) for b in code.func.params[len(xs):]]
    ws = [np.zeros(b.shape, b.dtype) for b in code.func.workspaces]
    kernel.module.run([*xs, *outs, *ws], len(outs))
    np.testing.assert_allclose(outs[0], ref(*xs), rtol=1e-4, atol=1e-4)
