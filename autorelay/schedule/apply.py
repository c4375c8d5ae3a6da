"""`apply(compute, steps) -> PrimFunc`: the one entry point from a schedule to loop IR."""

from __future__ import annotations

from collections.abc import Iterable

from autorelay.errors import ScheduleError
from autorelay.schedule.lower import Lowerer
from autorelay.schedule.state import State
from autorelay.schedule.step_effects import apply_step
from autorelay.schedule.steps import Step
from autorelay.te.tensor import ComputeDef
from autorelay.tir.nodes import PrimFunc
from autorelay.tir.verify import VerifyError, verify


def schedule_state(cdef: ComputeDef, steps: Iterable[Step]) -> State:
    state = State(cdef)
    for i, step in enumerate(steps):
        try:
            apply_step(state, step)
        except ScheduleError as e:
            raise ScheduleError(f"step {i} ({step}): {e}") from None
    return state


def apply(cdef: ComputeDef, steps: Iterable[Step] = ()) -> tuple[PrimFunc, State]:
    """Lower `cdef` under `steps`; ScheduleError if a step is illegal for this compute.

    Returns the loop IR and the final state (whose `relayouts` say how inputs are packed/padded).
    """
    state = schedule_state(cdef, steps)
    func = Lowerer(state, cdef.name).lower()
    try:
        verify(func)
    except VerifyError as e:  # a lowering bug or an unsupported combination of steps
        raise ScheduleError(f"{cdef.name}: schedule produced invalid loop IR: {e}") from None
    return func, state
