"""The graph executor's plan: value slots, steps in topological order and a static memory plan.

A plan is plain data (JSON-serialisable, the arrays aside) so a compiled model can be saved and
loaded without recompiling the graph. Slots are the tensors that flow between steps:

* ``input``  — a model input: the caller's array, or a copy of it in the slot's own buffer
  (`graph_executor.GraphExecutor.bind_inputs`);
* ``const``  — a constant (weights, possibly pre-packed for a kernel), owned by the executable;
* ``temp``   — an intermediate or output, placed in a shared storage block by `plan_memory`;
* ``alias``  — a contiguous piece of another slot (`autorelay.runtime.views`: reshapes, a
  constant-index take, a piece of a concatenation written in place): a view of slot `index` (an
  input, constant or temp; never another alias) starting `offset` elements in, with no storage of
  its own. A piece's alias is written by its producer's step and views a temp that comes later.
* ``padded`` — a temp with a zero border around a value (`autorelay.te.halo`): its storage block
  is zero-filled once and shared only with padded slots of the same shape, border and interior
  (whose writers write the same elements), so the border stays zero; the convolutions that would
  pad the value read this slot whole;
* ``interior`` — the value itself: the part of padded slot `index` past `halo` elements of
  border in each dimension (a strided view; kernels address it with the padded slot's strides).

Steps are ``kernel`` (a compiled kernel — including the packing kernels that re-lay-out a
non-constant input for a kernel reading it blocked), ``fallback`` (a primitive function run
through the ops' NumPy references) and ``relayout`` (a NumPy re-layout or copy, e.g. a model output
that is directly an input).

The memory plan gives every temp slot a storage block: walking the steps in order, a step's
outputs take free blocks (best fit, grown when needed) and the blocks of slots whose last reader
was this step are freed *after* the outputs are placed, so no step writes over its inputs. A slot
viewed by an alias counts as read (or written) wherever the alias is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

ALIGN = 64  # bytes: a cache line, and the alignment 512-bit vector loads like


@dataclass
class Slot:
    shape: tuple[int, ...]
    dtype: str
    kind: str  # "input" | "const" | "temp" | "alias" | "padded" | "interior"
    index: int = -1  # input position or constant index; storage block for temps (after planning)
    offset: int = 0  # an alias's first element in the slot it views
    halo: tuple[int, ...] = ()  # a padded slot's or an interior's border before it, per dimension

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_json(self) -> dict[str, Any]:
        d = {"shape": list(self.shape), "dtype": self.dtype, "kind": self.kind, "index": self.index}
        d |= {"offset": self.offset} if self.offset else {}
        return d | ({"halo": list(self.halo)} if self.halo else {})

    @staticmethod
    def from_json(d: dict[str, Any]) -> Slot:
        return Slot(tuple(d["shape"]), d["dtype"], d["kind"], d["index"], int(d.get("offset", 0)),
                    tuple(d.get("halo", ())))


@dataclass
class Step:
    """One call of the executor. `args`/`outputs` are slot ids; `kernel`/`function` index tables."""

    kind: str  # "kernel" | "fallback" | "external" (an offloaded layer: vta) | "relayout"
    name: str
    args: list[int]
    outputs: list[int]
    kernel: int = -1  # kernels table (kind == "kernel")
    function: int = -1  # functions table (kind == "fallback" or "external")
    relayout: list[Any] = field(default_factory=list)  # the packing ops (kind == "relayout")
    workload_key: str = ""
    source: str = ""  # tuned | transferred | default | fallback | relayout
    detail: str = ""  # template + knobs, or the fallback reason

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("kind", "name", "args", "outputs", "kernel", "function",
                                               "relayout", "workload_key", "source", "detail")}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Step:
        relay = [tuple(op) for op in d.get("relayout", [])]
        return Step(d["kind"], d["name"], list(d["args"]), list(d["outputs"]), d["kernel"], d["function"],
                    relay, d["workload_key"], d["source"], d["detail"])


@dataclass
class MemoryPlan:
    storage_bytes: list[int]  # one entry per shared block
    workspace_bytes: int  # one arena all kernels' scratch buffers share (they never overlap in time)
    zeroed: list[int] = field(default_factory=list)  # padded slots' blocks: zero-filled, shared only alike

    @property
    def peak_bytes(self) -> int:
        return sum(self.storage_bytes) + self.workspace_bytes


def _round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def storage_of(slots: list[Slot], k: int) -> int:
    """The slot whose storage slot `k` uses: itself, or the slot an alias or interior views."""
    return slots[k].index if slots[k].kind in ("alias", "interior") else k


def plan_memory(slots: list[Slot], steps: list[Step], outputs: list[int], workspace_bytes: int) -> MemoryPlan:
    """Assign a storage block to every temp slot (in place: `slot.index`); return the block sizes.

    A temp is placed at the first step that writes it or one of its aliases (a concatenation's
    pieces are written before the result exists as a value) and lives until the last step that
    reads or writes it or an alias of it. A padded slot's block is zero-filled once and shared
    only with padded slots of the same shape, border and interior (their writers write the same
    elements, so its border stays zero); sharing at all matters: a block of its own per layer
    would make every layer write to memory no recent layer touched, out of the cores' caches."""

    def root(k: int) -> int:
        return storage_of(slots, k)

    last_use: dict[int, int] = {}
    for i, st in enumerate(steps):
        for a in (*st.args, *st.outputs):
            last_use[root(a)] = i
    for o in outputs:
        last_use[root(o)] = len(steps)  # model outputs stay alive to the end
    blocks: list[int] = []
    free: list[int] = []
    zeroed: list[int] = []
    bordered: dict[tuple, list[int]] = {}  # (shape, dtype, border, interior) -> free zero-filled blocks
    interior = {s.index: s.shape for s in slots if s.kind == "interior"}

    def kind_of(k: int) -> tuple:
        """What a padded slot's writers write. Two values of one padded shape and leading border
        can still differ in the border after them (a Winograd reader pads its tiles' overhang)."""
        s = slots[k]
        return (s.shape, s.dtype, s.halo, interior.get(k))

    for i, st in enumerate(steps):
        for o in map(root, st.outputs):
            s = slots[o]
            if s.kind not in ("temp", "padded") or s.index >= 0:
                continue
            need = _round_up(max(s.nbytes, 1))
            if s.kind == "padded":
                pool = bordered.setdefault(kind_of(o), [])
                if pool:
                    s.index = pool.pop()
                else:
                    blocks.append(need)
                    s.index = len(blocks) - 1
                    zeroed.append(s.index)
                continue
            fits = [b for b in free if blocks[b] >= need]
            if fits:
                b = min(fits, key=lambda k: blocks[k])
            elif free:  # grow the largest free block rather than adding one
                b = max(free, key=lambda k: blocks[k])
                blocks[b] = need
            else:
                blocks.append(need)
                b = len(blocks) - 1
                free.append(b)
            free.remove(b)
            s.index = b
        for a in {root(x) for x in (*st.args, *st.outputs)}:
            s = slots[a]
            if s.kind == "padded" and last_use.get(a) == i and s.index >= 0:
                bordered[kind_of(a)].append(s.index)
            elif s.kind == "temp" and last_use.get(a) == i and s.index >= 0 and s.index not in free:
                free.append(s.index)  # one live slot per block at a time, so the block is now free
    unwritten = [s for s in slots if s.kind == "temp" and s.index < 0]
    if unwritten:  # empty values, which no step computes (`GraphBuilder`): any block holds them
        blocks.append(_round_up(1))
        for s in unwritten:
            s.index = len(blocks) - 1
    return MemoryPlan(blocks, _round_up(workspace_bytes), zeroed)


def aligned_empty(nbytes: int) -> np.ndarray:
    """A uint8 buffer of `nbytes` whose data pointer is ALIGN-aligned."""
    raw = np.empty(nbytes + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off : off + nbytes]


def view(block: np.ndarray, shape: tuple[int, ...], dtype: str, offset: int = 0) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return block[offset : offset + n].view(dtype).reshape(shape)
