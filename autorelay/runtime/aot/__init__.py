"""Ahead-of-time compilation of first-order programs with loops over tensors (the Relay paper's AoT).

    exe = autorelay.runtime.aot.compile(mod, target="llvm", params=params)
    out = exe(data)                # one native call runs the whole program

The module is prepared like the VM's (`autorelay.transform.prepare`), every fused primitive
function is compiled to a kernel, and the control flow itself is emitted as LLVM IR
(`autorelay.runtime.aot.emit`) that calls the kernels' segment functions directly on buffers
allocated once: a recurrent loop or a generative char-rnn runs without any per-step Python.
Kernels run single-threaded inside AoT code. Programs outside the supported subset raise
`AotError` naming the construct.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import require_host_supports
from autorelay.ir.expr import Function
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType
from autorelay.runtime.aot.emit import ModuleEmitter
from autorelay.runtime.aot.jit import jit_function
from autorelay.runtime.aot.kernels import AotError, KernelTable
from autorelay.runtime.aot.layout import leaves, list_element
from autorelay.runtime.fallback import unflatten_value
from autorelay.runtime.values import ConstructorValue, input_array
from autorelay.runtime.vm.kernels import build_report
from autorelay.schedule.source import ScheduleSource
from autorelay.target import Target
from autorelay.transform.prepare import prepare

__all__ = ["AotError", "AotExecutable", "KernelTable", "compile", "from_prepared"]

_LIBC = ctypes.CDLL(None)
_REALLOC = int(ctypes.cast(_LIBC.realloc, ctypes.c_void_p).value or 0)
_LIBC.free.argtypes = [ctypes.c_void_p]


class AotExecutable:
    """The compiled program: `exe(*inputs)` returns what the entry function returns."""

    def __init__(self, mod: IRModule, entry: str, table: KernelTable, llvm_ir: str, engine: Any,
                 fn: Any) -> None:
        self.mod, self.entry, self.table, self.llvm_ir = mod, entry, table, llvm_ir
        self._engine, self._fn = engine, fn  # the engine owns the code `_fn` points to
        main = mod[entry]
        self.params = main.params
        ret = main.ret_type if main.ret_type is not None else main.body.checked_type
        self.elem = list_element(mod, ret)
        self.ret = ret
        self.out_types = [] if self.elem is not None else leaves(ret, f"the result of @{entry}")
        self._in_types = [p.type_annotation or p.checked_type for p in self.params]
        if self.elem is not None:
            data = next(d for h, d in mod.type_definitions.items() if h == ret.func)
            self.cons = next(c for c in data.constructors if c.inputs)
            self.nil = next(c for c in data.constructors if not c.inputs)

    @property
    def input_names(self) -> list[str]:
        return [p.name_hint for p in self.params]

    def _check(self, args: Sequence[Any]) -> list[np.ndarray]:
        if len(args) != len(self.params):
            raise AotError(f"@{self.entry} expects {len(self.params)} input(s) "
                           f"({', '.join(self.input_names)}), got {len(args)}")
        out = []
        for p, t, a in zip(self.params, self._in_types, args):
            assert isinstance(t, TensorType)
            arr = np.asarray(a)
            if tuple(arr.shape) != t.concrete_shape:
                raise AotError(f"input {p.name_hint!r}: expected shape {t.concrete_shape}, "
                               f"got {tuple(arr.shape)}")
            arr, problem = input_array(arr, t.dtype)
            if problem:
                raise AotError(f"input {p.name_hint!r}: {problem}")
            out.append(np.ascontiguousarray(arr))
        return out

    def __call__(self, *inputs: Any) -> Any:
        require_host_supports(self.table.target, "this AoT program")
        ins = self._check(inputs)
        outs = [np.empty(t.concrete_shape, t.dtype) for t in self.out_types]
        lst = np.zeros(3, np.int64)  # {data, len, cap}, grown by realloc in generated code
        self._fn(*(a.ctypes.data for a in ins), *(o.ctypes.data for o in outs), lst.ctypes.data)
        if self.elem is None:
            return unflatten_value(self.ret, outs)
        return self._list(lst)

    def _list(self, lst: np.ndarray) -> ConstructorValue:
        addr, n = int(lst[0]), int(lst[1])
        assert self.elem is not None
        shape, dtype = self.elem.concrete_shape, np.dtype(self.elem.dtype)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        try:
            raw = ctypes.string_at(addr, n * size) if n else b""
        finally:
            if addr:
                _LIBC.free(ctypes.c_void_p(addr))
        items = np.frombuffer(raw, dtype).reshape((n, *shape)).copy()
        value = ConstructorValue(self.nil, ())
        for k in range(n - 1, -1, -1):
            value = ConstructorValue(self.cons, (items[k], value))
        return value

    def run(self, **named: Any) -> Any:
        missing = [n for n in self.input_names if n not in named]
        if missing or set(named) - set(self.input_names):
            raise AotError(f"inputs: expected {', '.join(self.input_names)}, got {', '.join(sorted(named))}")
        return self(*[named[n] for n in self.input_names])

    @property
    def report(self) -> Any:
        """Every distinct kernel: name, workload key, config source (`BuildReport`)."""
        return build_report(self.table.report())


def compile(
    mod: IRModule | Function,
    target: str | Target = "llvm",
    params: Mapping[str, np.ndarray] | None = None,
    schedules: ScheduleSource | None = None,
    *,
    pipeline: str | Any = "default",
    entry: str = "main",
) -> AotExecutable:
    """Prepare and compile a first-order program to native code (see the module docstring)."""
    prepared = prepare(mod, params, pipeline, entry)
    return from_prepared(prepared, KernelTable(resolve_target(target, 1), schedules), entry=entry)


def from_prepared(prepared: IRModule, table: KernelTable, *, entry: str = "main") -> AotExecutable:
    """Compile an already prepared module (`autorelay.transform.prepare`) with `table`'s kernels."""
    main = prepared[entry]
    for p in main.params:
        t = p.type_annotation or (p.checked_type if p.has_checked_type else None)
        if not isinstance(t, TensorType) or not t.is_static:
            raise AotError(f"AoT: input %{p.name_hint} of @{entry} has type {t}; AoT entry points take "
                           f"static tensors only (use the VM)")
    emitter = ModuleEmitter(prepared, table, _REALLOC)
    text = emitter.emit_all(entry)
    n = len(main.params) + len(emitter.signature(entry)[1]) + 1
    engine, fn = jit_function(text, f"aot_{entry}", n, table.target)
    return AotExecutable(prepared, entry, table, text, engine, fn)
