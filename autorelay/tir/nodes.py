"""Loop IR statements: the imperative program a schedule lowers a compute to.

Expressions are shared with the compute DSL (`autorelay.te.expr`); memory is accessed through
`Load(buffer, flat_index)` / `Store`; `Barrier` synchronises a GPU block and `shfl_down` (an
intrinsic call, below) exchanges a value between the lanes of a warp. Loops start at 0 and
carry a kind that code generation honours: serial, parallel (outlined to the thread pool),
vectorized (explicit vector ops), unrolled (the body is replicated with the variable replaced by
each constant), a dot (a reduction loop directly around a vectorized one, computed by an integer
dot-product instruction per vector; see `autorelay.codegen.llvm.dot`), or bound to a GPU block or
thread index (`blockIdx.x` …, `threadIdx.x` …).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autorelay.te.expr import Call, Const, Expr, Var
from autorelay.te.traverse import walk

# GPU loops: a loop bound to a block or thread index is not a loop in the kernel; its variable is
# that index (the launch's extent for the tag is the largest extent bound to it; smaller loops
# are guarded). `autorelay.codegen.nvptx.launch` checks how they nest.
BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
# A dot loop (`schedule.steps.Tensorize`): "dot" any int8/bf16 operands; "dot_narrow" also promises
# that each adjacent pair of the per-lane operand sums to at most 128 in magnitude (see
# `codegen.llvm.dot`: the byte multiply-add `vpmaddubsw` cannot saturate then).
DOT_KINDS = ("dot", "dot_narrow")
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", *DOT_KINDS, *BLOCK_TAGS, *THREAD_TAGS)


@dataclass(frozen=True, eq=False, slots=True)
class Buffer:
    """A dense row-major array. scope: 'global' (an argument or workspace), 'local' (stack; a GPU
    thread's private memory) or 'shared' (a GPU block's shared memory)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = "global"
    # Extra elements to allocate past `size`. Lowering now grows a workspace's leading dimension
    # instead (so allocating from `shape` suffices); kept at 0 for callers that add it.
    slack: int = 0
    # A parameter that is the interior of a larger zero-bordered array (`autorelay.te.halo`): the
    # shape whose row-major strides index it, the pointer at its first element. None: dense.
    pitch: tuple[int, ...] | None = None

    @property
    def strides_shape(self) -> tuple[int, ...]:
        """The shape whose row-major strides address the buffer's elements."""
        return self.pitch if self.pitch is not None else self.shape

    @property
    def size(self) -> int:
        """Elements addressable from the pointer: one past the flat index of the last element."""
        if self.pitch is not None:
            last, stride = 0, 1
            for s, p in reversed(list(zip(self.shape, self.pitch))):
                last += (s - 1) * stride
                stride *= p
            return last + 1
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self) -> str:
        return self.name


class Stmt:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class For(Stmt):
    var: Var
    extent: int
    body: Stmt
    kind: str = "serial"


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(frozen=True, slots=True)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True, slots=True)
class Barrier(Stmt):
    """Every thread of a GPU block waits here until all have arrived (`__syncthreads`); emitted
    around shared-memory copies. Only GPU code generation and its CPU emulation accept it."""


# The warp shuffle `shfl.sync.down` with a full mask, as an intrinsic call: in a warp of `width`
# lanes, lane l gets the `value` lane l + offset computed (its own when l + offset >= width). It is
# not a pure function: it is convergent (every lane of the warp must execute it together, so the
# launch check refuses it under a condition on the thread index and the emitter never duplicates
# it into branches) and it is legal only inside the value of a `Store`, where the CPU emulation
# (`codegen.nvptx.emulate`) turns it into an exchange between the lanes of a warp.
SHFL_DOWN = "warp_shfl_down"


def shfl_down(value: Expr, offset: int, width: int) -> Call:
    return Call(SHFL_DOWN, (value, Const(offset, "int32"), Const(width, "int32")), value.dtype)


def shuffles(e: Expr) -> list[Call]:
    """The warp shuffles in an expression (outermost first)."""
    return [n for n in walk(e) if isinstance(n, Call) and n.name == SHFL_DOWN]


def has_sync(s: Stmt) -> bool:
    """Whether `s` holds a barrier or a warp shuffle: code that threads must reach together."""
    return any(isinstance(t, Barrier) or (isinstance(t, Store) and shuffles(t.value)) for t in walk_stmts(s))


@dataclass(frozen=True, eq=False)
class PrimFunc:
    """A lowered kernel: `params` are the argument buffers (inputs then outputs), `workspaces` are
    global temporaries the runtime allocates, `body` is a Seq whose items run one after another."""

    name: str
    params: tuple[Buffer, ...]
    workspaces: tuple[Buffer, ...]
    body: Stmt

    def with_body(self, body: Stmt) -> PrimFunc:
        return replace(self, body=body)


def seq(stmts: list[Stmt] | tuple[Stmt, ...]) -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        elif s is not None:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def stmt_children(s: Stmt) -> list[Stmt]:
    if isinstance(s, (For, Allocate)):
        return [s.body]
    if isinstance(s, Seq):
        return list(s.stmts)
    if isinstance(s, If):
        return [s.then] + ([s.orelse] if s.orelse is not None else [])
    return []


def walk_stmts(s: Stmt) -> list[Stmt]:
    out: list[Stmt] = []
    stack = [s]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(reversed(stmt_children(n)))
    return out
