"""Run deeply recursive IR walks without hitting Python's recursion limit.

A 50-layer network is a chain of hundreds of nested lets or calls, and the recursive visitors,
printer and type checker walk it depth first. Rather than make every walker iterative, public
entry points run on a dedicated thread with a large stack and a high recursion limit. The
decorator is re-entrant: a call made while already on such a thread runs directly.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

STACK_BYTES = 1024 * 1024 * 1024  # virtual reservation; only touched pages are committed
RECURSION_LIMIT = 1_000_000

_local = threading.local()


def run_deep(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call `fn(*args, **kwargs)` on a big-stack thread and return its result (or raise its error)."""
    if getattr(_local, "deep", False):
        return fn(*args, **kwargs)
    result: list[Any] = []
    error: list[BaseException] = []

    def target() -> None:
        _local.deep = True
        try:
            result.append(fn(*args, **kwargs))
        except BaseException as e:  # re-raised in the caller's thread
            error.append(e)

    # The limit is per interpreter, so it stays raised: restoring it while another deep thread
    # runs would break that thread. Only deep threads have the stack to use it.
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
    old_size = threading.stack_size()
    threading.stack_size(STACK_BYTES)
    try:
        t = threading.Thread(target=target, name="autorelay-deep")
        t.start()
    finally:
        threading.stack_size(old_size)
    t.join()
    if error:
        raise error[0].with_traceback(error[0].__traceback__)
    return result[0]


def deep(fn: F) -> F:
    """Decorator form of `run_deep`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run_deep(fn, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
