"""The accelerator's simulator: functional (bit-exact results) and cycle-level (a timeline per
module) in one discrete-event run.

Three modules run concurrently: **load** (LOADs of inputs and weights), **compute** (LOADs of
micro-ops and accumulators, GEMM, ALU, FINISH) and **store** (STOREs). They synchronise only through
four token queues: load->compute, compute->load, compute->store, store->compute. An instruction's
`pop_prev`/`pop_next` bits take one token from the queue its previous/next module pushes to — it
stalls while that queue is empty — and `push_prev`/`push_next` put one there when it finishes (load
has no previous module, store no next). Instructions of one module run in program order.

Each step runs, among the modules whose next instruction has its tokens, the one that can start
earliest (start = max(the module is free, the popped tokens' push times)); so the data an
instruction sees is what the hardware would see under the same dependencies. When no module can go
while instructions remain, the run is a `DeadlockError` naming each stuck instruction.

Costs (cycles): LOAD/STORE a fixed DRAM latency plus bytes / bandwidth; GEMM and ALU a pipeline
fill plus one micro-op per cycle per loop iteration; FINISH one. The model ignores: DRAM bank and
burst effects and contention between the load and store modules for the memory interface, SRAM
port conflicts, instruction fetch and decode (the queues are never full), the cost of zero padding,
and the host's time to launch the stream.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from autorelay.errors import AutoRelayError
from autorelay.vta.config import VTAConfig
from autorelay.vta.isa import AluInsn, AluOp, FinishInsn, GemmInsn, Insn, Mem, MemInsn, Opcode, uop_fields

MODULES = ("load", "compute", "store")


class VTAError(AutoRelayError):
    """A program the accelerator cannot run; the message names the instruction."""


class DeadlockError(VTAError):
    pass


class SramOverflowError(VTAError):
    pass


class DramRangeError(VTAError):
    pass


@dataclass
class SimResult:
    cycles: int
    busy: dict[str, int]  # cycles each module spent executing
    gemm_cycles: int  # cycles the GEMM core spent on accumulating (not reset) micro-ops
    instructions: int
    clock_mhz: float

    @property
    def utilization(self) -> float:
        """Fraction of all cycles the GEMM core did useful multiply-adds."""
        return self.gemm_cycles / self.cycles if self.cycles else 0.0

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_mhz * 1e6)


def module_of(insn: Insn) -> str:
    if isinstance(insn, MemInsn):
        if insn.opcode == Opcode.STORE:
            return "store"
        return "load" if insn.mem in (Mem.INP, Mem.WGT) else "compute"
    return "compute"


# (module, direction) -> the queue popped / pushed
_POP = {("load", "next"): "c2l", ("compute", "prev"): "l2c", ("compute", "next"): "s2c",
        ("store", "prev"): "c2s"}
_PUSH = {("load", "next"): "l2c", ("compute", "prev"): "c2l", ("compute", "next"): "c2s",
         ("store", "prev"): "s2c"}


@dataclass
class Machine:
    """The SRAM buffers and DRAM of one simulated run."""

    config: VTAConfig
    dram: np.ndarray  # uint8
    sram: dict[str, np.ndarray] = field(default_factory=dict)
    uops: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    tile_bytes: dict[str, int] = field(default_factory=dict)  # looked up per LOAD / STORE: once here

    def __post_init__(self) -> None:
        c = self.config
        self.tile_bytes = {mem: c.tile_bytes(mem) for mem in ("inp", "wgt", "acc", "out", "uop")}
        for mem in ("inp", "wgt", "acc"):
            self.sram[mem] = np.zeros((c.depth(mem), *c.tile_shape(mem)), c.tile_dtype(mem))
        self.uops = np.zeros((c.depth("uop"), 3), np.int64)


def simulate(program: list[Insn], dram: np.ndarray, config: VTAConfig | None = None, *,
             functional: bool = True) -> SimResult:
    """Run `program` over the byte array `dram` (changed in place by STOREs).

    `functional=False` runs the cycle model alone: the same timeline, token checks and deadlock
    detection, but no data moves and no buffer or DRAM bounds are checked (a program's
    correctness is the functional run's to establish; this mode is for timing it again)."""
    config = config or VTAConfig()
    if dram.dtype != np.uint8 or dram.ndim != 1:
        raise VTAError("DRAM must be a one-dimensional uint8 array")
    m = Machine(config, dram)
    pending: dict[str, deque] = {name: deque() for name in MODULES}
    for i, insn in enumerate(program):  # each instruction's queues resolved once, not per step
        name = module_of(insn)
        pending[name].append((i, insn, _pops(name, insn, i), _pushes(name, insn, i)))
    tokens: dict[str, deque[int]] = {q: deque() for q in ("l2c", "c2l", "c2s", "s2c")}
    free = dict.fromkeys(MODULES, 0)
    busy = dict.fromkeys(MODULES, 0)
    gemm_cycles = 0
    while any(pending.values()):
        best = None
        for name in MODULES:
            if not pending[name]:
                continue
            queues = pending[name][0][2]
            if all(tokens[q] for q in queues):
                start = max([free[name], *(tokens[q][0] for q in queues)])
                if best is None or start < best[0]:
                    best = (start, name)
        if best is None:
            raise DeadlockError("deadlock: " + "; ".join(_stuck(name, pending[name][0][:2], tokens)
                                                         for name in MODULES if pending[name]))
        start, name = best
        i, insn, queues, pushes = pending[name].popleft()
        for q in queues:
            tokens[q].popleft()
        cost, useful = _execute(m, insn, i, functional)
        end = start + cost
        free[name] = end
        busy[name] += cost
        gemm_cycles += useful
        for q in pushes:
            tokens[q].append(end)
    return SimResult(max(free.values()), busy, gemm_cycles, len(program), config.clock_mhz)


def _pops(module: str, insn: Insn, i: int) -> list[str]:
    return _queues(_POP, module, insn.deps.pop_prev, insn.deps.pop_next, i, "pop")


def _pushes(module: str, insn: Insn, i: int) -> list[str]:
    return _queues(_PUSH, module, insn.deps.push_prev, insn.deps.push_next, i, "push")


def _queues(table: dict, module: str, prev: bool, nxt: bool, i: int, verb: str) -> list[str]:
    out = []
    for flag, side in ((prev, "prev"), (nxt, "next")):
        if flag:
            q = table.get((module, side))
            if q is None:
                raise VTAError(f"instruction {i}: the {module} module has no {side} module to {verb} "
                               f"a token {'from' if verb == 'pop' else 'to'}")
            out.append(q)
    return out


def _stuck(name: str, head: tuple[int, Insn], tokens: dict[str, deque[int]]) -> str:
    i, insn = head
    empty = [q for q in _pops(name, insn, i) if not tokens[q]]
    return f"{name} waits at instruction {i} ({type(insn).__name__}) on empty queue(s) {', '.join(empty)}"


def _execute(m: Machine, insn: Insn, i: int, functional: bool = True) -> tuple[int, int]:
    """Run one instruction (its data effects only when `functional`); (its cycles, its useful
    GEMM cycles)."""
    c = m.config
    if isinstance(insn, FinishInsn):
        return 1, 0
    if isinstance(insn, MemInsn):
        tiles = insn.y_size * insn.x_size
        mem = insn.mem.name.lower()
        cost = c.dram_latency_cycles + math.ceil(tiles * m.tile_bytes[mem] / c.dram_bytes_per_cycle)
        if functional:
            (_load if insn.opcode == Opcode.LOAD else _store)(m, insn, i)
        return cost, 0
    n = insn.iter_out * insn.iter_in * max(0, insn.uop_end - insn.uop_begin)
    if isinstance(insn, GemmInsn):
        if functional:
            _gemm(m, insn, i)
        return c.gemm_pipeline_cycles + n, 0 if insn.reset else n
    if functional:
        _alu(m, insn, i)
    return c.alu_pipeline_cycles + n, 0


def _dram_tiles(m: Machine, mem: str, insn: MemInsn, i: int) -> tuple[np.ndarray, np.ndarray]:
    """A view of DRAM as tiles of `mem` and the (y_size, x_size) tile indices the instruction names."""
    c = m.config
    tb = c.tile_bytes(mem)
    count = m.dram.size // tb
    idx = (insn.dram_base + np.arange(insn.y_size)[:, None] * insn.x_stride
           + np.arange(insn.x_size)[None, :])
    if idx.size and int(idx.max()) >= count:
        raise DramRangeError(f"instruction {i}: {insn.opcode.name} of {mem} reaches DRAM tile "
                             f"{int(idx.max())}, past the {count} tiles ({m.dram.size} bytes) there are")
    view = m.dram[: count * tb].view(c.tile_dtype(mem)).reshape(count, *c.tile_shape(mem))
    return view, idx


def _check_sram(m: Machine, mem: str, last: int, i: int, what: str) -> None:
    depth = m.config.depth(mem)
    if last >= depth:
        raise SramOverflowError(f"instruction {i}: {what} reaches {mem} buffer entry {last}, "
                                f"past its {depth} entries")


def _load(m: Machine, insn: MemInsn, i: int) -> None:
    mem = insn.mem.name.lower()
    if mem == "out":
        raise VTAError(f"instruction {i}: LOAD into the output buffer (it is written by the core)")
    pads = (insn.y_pad0, insn.y_pad1, insn.x_pad0, insn.x_pad1)
    if any(pads) and mem != "inp":
        raise VTAError(f"instruction {i}: zero padding applies to input loads only, not {mem}")
    view, idx = _dram_tiles(m, "uop" if mem == "uop" else mem, insn, i)
    width = insn.x_pad0 + insn.x_size + insn.x_pad1
    rows = insn.y_pad0 + insn.y_size + insn.y_pad1
    _check_sram(m, mem, insn.sram_base + rows * width - 1, i, "LOAD")
    data = view[idx]  # (y, x, *tile)
    if mem == "uop":
        fields_ = uop_fields(data)
        m.uops[insn.sram_base: insn.sram_base + len(fields_)] = fields_
        return
    block = np.zeros((rows, width, *data.shape[2:]), data.dtype)
    block[insn.y_pad0: insn.y_pad0 + insn.y_size, insn.x_pad0: insn.x_pad0 + insn.x_size] = data
    m.sram[mem][insn.sram_base: insn.sram_base + rows * width] = block.reshape(rows * width, *data.shape[2:])


def _store(m: Machine, insn: MemInsn, i: int) -> None:
    if insn.mem != Mem.OUT:
        raise VTAError(f"instruction {i}: STORE reads the output buffer, not {insn.mem.name.lower()}")
    if any((insn.y_pad0, insn.y_pad1, insn.x_pad0, insn.x_pad1)):
        raise VTAError(f"instruction {i}: a STORE cannot pad")
    view, idx = _dram_tiles(m, "out", insn, i)
    n = insn.y_size * insn.x_size
    _check_sram(m, "acc", insn.sram_base + n - 1, i, "STORE")
    out = m.sram["acc"][insn.sram_base: insn.sram_base + n].astype(np.int8)  # the low byte, as VTA
    view[idx.reshape(-1)] = out


def _loop_indices(insn: GemmInsn | AluInsn, m: Machine, i: int) -> tuple[np.ndarray, ...]:
    if insn.uop_end > m.config.depth("uop") or insn.uop_begin > insn.uop_end:
        raise SramOverflowError(f"instruction {i}: micro-ops [{insn.uop_begin}, {insn.uop_end}) are "
                                f"outside the {m.config.depth('uop')}-entry micro-op buffer")
    u = m.uops[insn.uop_begin: insn.uop_end]
    i0 = np.arange(insn.iter_out)[:, None, None]
    i1 = np.arange(insn.iter_in)[None, :, None]
    dst = (u[None, None, :, 0] + i0 * insn.dst_out + i1 * insn.dst_in).reshape(-1)
    src = (u[None, None, :, 1] + i0 * insn.src_out + i1 * insn.src_in).reshape(-1)
    w_out, w_in = (insn.wgt_out, insn.wgt_in) if isinstance(insn, GemmInsn) else (0, 0)
    wgt = (u[None, None, :, 2] + i0 * w_out + i1 * w_in).reshape(-1)
    return dst, src, wgt


def _gemm(m: Machine, insn: GemmInsn, i: int) -> None:
    dst, src, wgt = _loop_indices(insn, m, i)
    if dst.size == 0:
        return
    _check_sram(m, "acc", int(dst.max()), i, "GEMM")
    acc = m.sram["acc"]
    if insn.reset:
        acc[dst] = 0
        return
    _check_sram(m, "inp", int(src.max()), i, "GEMM")
    _check_sram(m, "wgt", int(wgt.max()), i, "GEMM")
    a = m.sram["inp"][src].astype(np.int32)  # (n, batch, block_in)
    w = m.sram["wgt"][wgt].astype(np.int32)  # (n, block_out, block_in)
    np.add.at(acc, dst, np.einsum("nbi,noi->nbo", a, w))


def _alu(m: Machine, insn: AluInsn, i: int) -> None:
    dst, src, _ = _loop_indices(insn, m, i)
    if dst.size == 0:
        return
    acc = m.sram["acc"]
    _check_sram(m, "acc", int(max(dst.max(), src.max())), i, "ALU")
    if np.unique(dst).size != dst.size:  # a destination updated twice: in order, one at a time
        for d, s in zip(dst, src):
            acc[d] = _alu_op(insn, acc[d], acc[s])
        return
    acc[dst] = _alu_op(insn, acc[dst], acc[src])


def _alu_op(insn: AluInsn, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x = a.astype(np.int64)
    y = np.int64(insn.imm) if insn.use_imm else b.astype(np.int64)
    if insn.op == AluOp.MIN:
        r = np.minimum(x, y)
    elif insn.op == AluOp.MAX:
        r = np.maximum(x, y)
    elif insn.op == AluOp.ADD:
        r = x + y
    elif insn.op == AluOp.MUL:
        r = x * y
    else:  # SHR: arithmetic shift right; a negative amount shifts left
        shift = np.broadcast_to(np.clip(y, -31, 31), x.shape)
        r = np.where(shift >= 0, x >> np.maximum(shift, 0), x << np.maximum(-shift, 0))
    return (r & 0xFFFFFFFF).astype(np.uint32).view(np.int32)  # 32-bit wrap-around, as the hardware


__all__ = ["DeadlockError", "DramRangeError", "Machine", "SimResult", "SramOverflowError", "VTAError",
           "module_of", "simulate"]
