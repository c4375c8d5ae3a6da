"""Calling a compiled kernel from the VM with as little Python as possible.

Kernel calls are where the VM spends its time, and the obvious way — `ndarray.ctypes.data` for
every argument, `np.empty` for every result — costs several microseconds per call. Instead:

* outputs come from a small per-call-site pool of preallocated buffers with known addresses; a
  buffer is reused only when nothing but the pool refers to it any more (`sys.getrefcount` back at
  its baseline), so a value still held in a register, a list cell or a caller's frame is never
  overwritten;
* input addresses are looked up by object identity in an `AddressBook` (pool buffers and constants
  are registered permanently, other arrays for the current run);
* each `CompiledCall` generates a small Python stub specialised to its kernel's argument layout
  (which inputs are constants, how many outputs, how many segments), so a call is a few dictionary
  lookups and one ctypes call per segment.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np

from autorelay.codegen.llvm.threads import pointer_array, run_job
from autorelay.ir.expr import Function
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.lower.relayout import PackKernels
from autorelay.schedule.relayout import relayout

_POOL = 3  # buffers per call site: the value being computed, the live one, one spare
_TRANSIENT_MAX = 4096


class AddressBook:
    """Data addresses of arrays by identity: permanent entries (pool buffers, constants) and
    entries for the current run (inputs, reference-kernel results), dropped by `end_run`."""

    def __init__(self) -> None:
        # id -> (the array looked up, its address, the contiguous array at that address)
        self.permanent: dict[int, tuple[Any, int, np.ndarray]] = {}
        self.transient: dict[int, tuple[Any, int, np.ndarray]] = {}

    def add(self, arr: np.ndarray) -> int:
        addr = int(arr.ctypes.data)
        self.permanent[id(arr)] = (arr, addr, arr)
        return addr

    def drop(self, arr: np.ndarray) -> None:
        self.permanent.pop(id(arr), None)

    def address(self, a: Any) -> tuple[int, np.ndarray]:
        """(address, the contiguous array at that address — keep it alive during the call)."""
        hit = self.permanent.get(id(a)) or self.transient.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1], hit[2]
        arr = a if isinstance(a, np.ndarray) and a.flags.c_contiguous else np.ascontiguousarray(a)
        addr = int(arr.ctypes.data)
        if len(self.transient) < _TRANSIENT_MAX:
            self.transient[id(a)] = (a, addr, arr)
        return addr, arr

    def end_run(self) -> None:
        self.transient.clear()


def _flat_types(t: Type | None) -> list[TensorType]:
    if isinstance(t, TensorType):
        return [t]
    if isinstance(t, TupleType):
        return [x for f in t.fields for x in _flat_types(f)]
    raise TypeError(f"a primitive function returning {t} cannot be a kernel")


class CompiledCall:
    """A compiled kernel bound to one primitive function (constants packed once), callable on arrays.
    An argument the kernel reads blocked is packed on every call by a compiled packing kernel
    (`packs`) into a buffer of the call site's own."""

    def __init__(self, kernel: Any, lowered: Any, fn: Function, book: AddressBook, threads: int,
                 packs: PackKernels) -> None:
        self.kernel, self.book = kernel, book
        self.segments = list(kernel.module.functions)
        self.nparams = len(fn.params)
        self.inputs: list[tuple[int, int | None, list]] = []  # (param index, const address, relayout)
        self._consts: list[np.ndarray] = []
        # input position -> (packing kernel, its output buffer, its workspaces)
        self.packs: dict[int, tuple[Any, np.ndarray, list[np.ndarray]]] = {}
        for k, (t, src) in enumerate(zip(kernel.cdef.inputs, lowered.sources)):
            ops = list(kernel.relayouts.get(t.name, []))
            if src.kind == "const":
                arr = np.ascontiguousarray(relayout(np.asarray(src.value), ops))
                self._consts.append(arr)
                self.inputs.append((-1, book.add(arr), []))
                continue
            if ops:
                pack = packs.for_param(fn, src.index, ops)
                packed = pack.func.params[1]
                self.packs[k] = (pack, np.zeros(tuple(packed.shape), packed.dtype),
                                 [np.zeros(b.size + b.slack, b.dtype) for b in pack.func.workspaces])
            self.inputs.append((src.index, None, ops))
        n_in = len(kernel.cdef.inputs)
        self.out_bufs = [(tuple(b.shape), b.dtype) for b in kernel.func.params[n_in:]]
        ret = fn.ret_type if fn.ret_type is not None else fn.body.checked_type
        self.out_types = _flat_types(ret)
        self.is_tuple = isinstance(ret, TupleType)
        self.ws = [np.zeros(b.size + b.slack, b.dtype) for b in kernel.func.workspaces]
        self.ws_addrs = tuple(int(w.ctypes.data) for w in self.ws)
        # entries: [objects to check, output addresses, result, refcounts when free]
        self.pool: list[list] = []
        self.allocated = 0  # output sets ever allocated (pool misses), for tests and tuning
        self.set_threads(threads)

    # ---- output pool -----------------------------------------------------------------------
    def _new_entry(self) -> list:
        self.allocated += 1
        # bool results are allocated as bool (one byte each, the kernels' uint8 storage), never as a
        # view: a view of a view points at the owner, which would hide holders from the refcount
        shown = tuple(np.empty(shape, np.bool_ if t.dtype == "bool" else dtype)
                      for (shape, dtype), t in zip(self.out_bufs, self.out_types))
        addrs = tuple(self.book.add(x) for x in shown)
        if self.is_tuple:
            return [(shown, *shown), addrs, shown, ()]
        return [shown[0], addrs, shown[0], 0]

    def _grow(self) -> list:
        """A new pool entry (all current ones are in use); the oldest leaves a full pool."""
        entry = self._new_entry()
        if len(self.pool) >= _POOL:  # its holders keep it alive; the pool forgets it
            old = self.pool.pop(0)
            for x in (old[0] if self.is_tuple else (old[0],)):
                self.book.drop(x)
        self.pool.append(entry)
        getrc = sys.getrefcount
        entry[3] = tuple(map(getrc, entry[0])) if self.is_tuple else getrc(entry[0])
        return entry

    # ---- the stub ----------------------------------------------------------------------------
    def set_threads(self, threads: int) -> None:
        """(Re)generate the call stub; parallel segments are split over `threads` threads."""
        self.threads = threads
        names = [f"a{i}" for i in range(self.nparams)]
        body: list[str] = []
        ns: dict[str, Any] = {"get": self.book.permanent.get, "slow": self.book.address, "pool": self.pool,
                              "grow": self._grow, "getrc": sys.getrefcount}
        args: list[str] = []
        for k, (index, caddr, _ops) in enumerate(self.inputs):
            if caddr is not None:
                args.append(str(caddr))
                continue
            a = names[index]
            body.append(f"    h = get(id({a}))")
            body.append(f"    if h is not None and h[0] is {a}:")
            body.append(f"        x{k} = h[1]")
            body.append("    else:")
            body.append(f"        x{k}, k{k} = slow({a})")
            if k in self.packs:  # pack it into the call site's buffer, whose address the kernel reads
                pack, packed, ws = self.packs[k]
                argv = ", ".join([f"x{k}", str(packed.ctypes.data), *(str(w.ctypes.data) for w in ws)])
                for j, (fn, par) in enumerate(pack.module.functions):
                    ns[f"p{k}_{j}"] = fn
                    body.append(f"    p{k}_{j}({argv}, 0, {par})")
                args.append(str(packed.ctypes.data))
                continue
            args.append(f"x{k}")
        check = "tuple(map(getrc, e[0])) == e[3]" if self.is_tuple else "getrc(e[0]) == e[3]"
        body += ["    for e in pool:", f"        if {check}:", "            break", "    else:",
                 "        e = grow()", "    o = e[1]"]
        args += [f"o[{i}]" for i in range(len(self.out_bufs))] + [str(w) for w in self.ws_addrs]

        ns.update(run_job=run_job, pointer_array=pointer_array, addressof=ctypes.addressof)
        jobs = self.kernel.module.jobs
        if threads > 1 and any(par for _, par in self.segments):
            body.append(f"    argv = pointer_array(({', '.join(args)},))")
        for s, (fn, par) in enumerate(self.segments):
            ns[f"f{s}"] = fn
            if par and threads > 1:
                body.append(f"    run_job({jobs[s]}, addressof(argv), {par}, {threads})")
            else:
                body.append(f"    f{s}({', '.join(args)}, 0, {par})")
        body.append("    return e[2]")
        src = f"def stub({', '.join(names)}):\n" + "\n".join(body) + "\n"
        exec(compile(src, f"<kernel stub {self.kernel.cdef.name}>", "exec"), ns)
        self.stub = ns["stub"]
        self.source = src

    def __call__(self, *args: Any) -> Any:
        return self.stub(*args)
