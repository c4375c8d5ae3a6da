"""Loop IR -> LLVM IR for NVPTX: one `ptx_kernel` per segment of a GPU-scheduled PrimFunc.

The statement and expression emission is the CPU backend's (`SegmentEmitter`, `ExprEmitter`):
serial, unrolled and vectorized loops, guard unswitching, register tiles in entry-block allocas,
integer and float arithmetic are target-neutral LLVM IR. What differs is here:

* the kernel signature: `define ptx_kernel void @k(ptr addrspace(1) noalias %g0, ...)`; each
  global pointer is cast to a generic one once (LLVM's address-space inference turns the loads
  and stores back into `ld.global`/`st.global`);
* loops bound to `blockIdx.*`/`threadIdx.*` are not loops: the variable is the index read from
  `llvm.nvvm.read.ptx.sreg.{ctaid,tid}.*`, guarded when the loop is shorter than the launch;
* a `shared` allocation is a module-level `addrspace(3)` array, a `Barrier` is `bar.sync 0`;
* a warp shuffle (`tir.nodes.shfl_down`) is `llvm.nvvm.shfl.sync.down.{f32,i32}` with a full mask
  (`shfl.sync.down.b32`): 32-bit values directly, narrower ones widened to i32, 64-bit ones as two
  32-bit shuffles of their halves; code holding one, like code holding a barrier, is never
  duplicated into branches that threads may take apart;
* math calls go to libdevice (`__nv_expf`, …), which `ptx.py` links in: LLVM's `llvm.exp.*`
  has no NVPTX lowering.
"""

from __future__ import annotations

from autorelay.codegen.llvm.calls import bf16_to_f32, f32_to_bf16, reinterpret_bits
from autorelay.codegen.llvm.emit import SegmentEmitter, segments
from autorelay.codegen.llvm.loop_shapes import expand_unrolled
from autorelay.codegen.llvm.values import Val, float_hex, llvm_type, mem_type
from autorelay.codegen.nvptx.launch import Launch, launch_of
from autorelay.errors import ScheduleError
from autorelay.target import Target
from autorelay.te.expr import BF16_FUNCS, REINTERPRET, Call, Cmp, Const
from autorelay.tir.nodes import (
    BLOCK_TAGS,
    SHFL_DOWN,
    THREAD_TAGS,
    Allocate,
    Barrier,
    Buffer,
    For,
    If,
    PrimFunc,
    Stmt,
    has_sync,
)

# loop-IR math function -> libdevice name (float32; float64 drops the trailing "f")
LIBDEVICE = {
    "exp": "__nv_expf", "log": "__nv_logf", "sqrt": "__nv_sqrtf", "abs": "__nv_fabsf",
    "floor": "__nv_floorf", "ceil": "__nv_ceilf", "round": "__nv_rintf", "pow": "__nv_powf",
    "tanh": "__nv_tanhf", "erf": "__nv_erff", "sin": "__nv_sinf", "cos": "__nv_cosf",
    "tan": "__nv_tanf", "atan": "__nv_atanf",
}
_SREG = {"blockIdx": "ctaid", "threadIdx": "tid"}
_BITS = {"float": 32, "double": 64, "half": 16, "bfloat": 16, "i64": 64, "i32": 32, "i16": 16, "i8": 8,
         "i1": 1}
_BARRIER = "@llvm.nvvm.barrier.cta.sync.aligned.all"  # bar.sync 0: __syncthreads()


def libdevice_name(fn: str, dtype: str) -> str:
    name = LIBDEVICE[fn]
    return name if dtype == "float32" else name[:-1]


class KernelEmitter(SegmentEmitter):
    def __init__(self, fname: str, buffers: list[Buffer], stmt: Stmt, launch: Launch):
        super().__init__(fname, buffers, stmt)
        self.launch = launch
        self.globals: list[str] = []  # shared-memory arrays (addrspace 3)

    def emit(self) -> str:
        self.block = "entry"
        self.lines += [f"  %b{i} = addrspacecast ptr addrspace(1) %g{i} to ptr"
                       for i in range(len(self.buffers))]
        self.stmt_(expand_unrolled(self.stmt, {}))
        self.lines.append("  ret void")
        args = ", ".join(f"ptr addrspace(1) noalias %g{i}" for i in range(len(self.buffers)))
        head = f"define ptx_kernel void @{self.fname}({args}) #0 {{\nentry:"
        return "\n".join([head, *self.allocas, *self.lines, "}"])

    def stmt_(self, s: Stmt) -> None:
        if isinstance(s, For) and s.kind in BLOCK_TAGS + THREAD_TAGS:
            self._bound(s)
        elif isinstance(s, Barrier):
            self.declared.add(f"declare void {_BARRIER}(i32)")
            self.lines.append(f"  call void {_BARRIER}(i32 0)")
        elif isinstance(s, Allocate) and s.buffer.scope == "shared":
            b = s.buffer
            name = f"{self.fname}_sh{len(self.globals)}"
            self.globals.append(f"@{name} = internal addrspace(3) global [{b.size} x {mem_type(b.dtype)}] "
                                f"undef, align 16")
            self.allocas.append(f"  %{name} = addrspacecast ptr addrspace(3) @{name} to ptr")
            self.ptr[id(b)] = f"%{name}"
            self.stmt_(s.body)
        else:
            super().stmt_(s)

    # code holding a barrier must not be duplicated into branches that threads may take apart
    def _unswitch(self, s: For) -> bool:
        return not has_sync(s) and super()._unswitch(s)

    def _hoist_guards(self, body: Stmt) -> bool:
        return not has_sync(body) and super()._hoist_guards(body)

    def _bound(self, s: For) -> None:
        """A loop bound to a block/thread index: its variable is the index."""
        group, axis = s.kind.split(".")
        reg = f"@llvm.nvvm.read.ptx.sreg.{_SREG[group]}.{axis}"
        self.declared.add(f"declare i32 {reg}()")
        raw = self.op(f"call i32 {reg}()", "int32")
        self.env[s.var] = self.op(f"zext i32 {raw.ref} to i64", "int64")
        old = self.bounds.get(s.var)
        if s.extent < self.launch.extent(s.kind):
            self._if(If(Cmp("lt", s.var, Const(s.extent, "int64")), s.body))
        else:
            self.bounds[s.var] = (0, s.extent - 1)
            self.stmt_(s.body)
        if old is None:
            self.bounds.pop(s.var, None)
        del self.env[s.var]

    def call(self, e: Call) -> Val:
        """Math through libdevice, lane by lane in a vector context; bfloat16 conversions as the
        CPU backend's integer arithmetic on the bits (target-independent IR, no library)."""
        if e.name == SHFL_DOWN:
            return self._shfl_down(e)
        args = [self.sub(a) for a in e.args]
        lanes = max(a.lanes for a in args)
        st = llvm_type(e.dtype)
        if e.name in BF16_FUNCS:
            return (bf16_to_f32 if e.name == "bf16_to_f32" else f32_to_bf16)(self, args[0])
        if e.name == REINTERPRET:
            return reinterpret_bits(self, args[0], e.dtype)
        if e.name == "sigmoid":
            return self._lanes(lambda xs: self._sigmoid(xs[0], e.dtype), args, e.dtype, lanes)
        if e.name not in LIBDEVICE or e.dtype not in ("float32", "float64"):
            # a ScheduleError: the build runs this function's references instead, and says so
            raise ScheduleError(f"nvptx codegen: no libdevice function for {e.name} on {e.dtype}")
        fn = libdevice_name(e.name, e.dtype)
        self.declared.add(f"declare {st} @{fn}({', '.join(st for _ in args)})")

        def one(xs: list[Val]) -> Val:
            return self.op(f"call {st} @{fn}({', '.join(f'{st} {x.ref}' for x in xs)})", e.dtype)

        return self._lanes(one, args, e.dtype, lanes)

    def _shfl_down(self, e: Call) -> Val:
        """`shfl.sync.down` with a full mask over a warp of `width` lanes, for any scalar dtype."""
        v = self.sub(e.args[0])
        if v.lanes:
            raise ScheduleError("nvptx codegen: a warp shuffle of a vector value")
        offset, width = (int(a.value) for a in e.args[1:] if isinstance(a, Const))
        clamp = ((32 - width) << 8) | 0x1F  # the segment mask and the last lane of the segment
        st = llvm_type(e.dtype)
        bits = _BITS[st]

        def shfl32(ref: str, ty: str) -> str:
            fn = f"@llvm.nvvm.shfl.sync.down.{ty}"
            lt = "float" if ty == "f32" else "i32"
            self.declared.add(f"declare {lt} {fn}(i32, {lt}, i32, i32)")
            return self.op(f"call {lt} {fn}(i32 -1, {lt} {ref}, i32 {offset}, i32 {clamp})", e.dtype,
                           pure=False).ref  # convergent: each shuffle the IR asks for is made

        if st in ("float", "i32"):
            return Val(shfl32(v.ref, "f32" if st == "float" else "i32"), e.dtype)
        word = v.ref if st == f"i{bits}" else self.op(f"bitcast {st} {v.ref} to i{bits}", e.dtype).ref
        if bits == 64:
            halves = self.op(f"bitcast i64 {word} to <2 x i32>", e.dtype).ref
            out = "poison"
            for h in range(2):
                part = self.op(f"extractelement <2 x i32> {halves}, i32 {h}", e.dtype).ref
                moved = shfl32(part, "i32")
                out = self.op(f"insertelement <2 x i32> {out}, i32 {moved}, i32 {h}", e.dtype).ref
            word = self.op(f"bitcast <2 x i32> {out} to i64", e.dtype).ref
        else:  # narrower than 32 bits: widen, shuffle, narrow
            wide = self.op(f"zext i{bits} {word} to i32", e.dtype).ref
            word = self.op(f"trunc i32 {shfl32(wide, 'i32')} to i{bits}", e.dtype).ref
        if st == f"i{bits}":
            return Val(word, e.dtype)
        return Val(self.op(f"bitcast i{bits} {word} to {st}", e.dtype).ref, e.dtype)

    def _sigmoid(self, x: Val, dtype: str) -> Val:
        st, one = llvm_type(dtype), float_hex(1.0, dtype)
        fn = libdevice_name("exp", dtype)
        self.declared.add(f"declare {st} @{fn}({st})")
        neg = self.op(f"fneg {st} {x.ref}", dtype)
        ex = self.op(f"call {st} @{fn}({st} {neg.ref})", dtype)
        den = self.op(f"fadd {st} {one}, {ex.ref}", dtype)
        return self.op(f"fdiv {st} {one}, {den.ref}", dtype)

    def _lanes(self, fn, args: list[Val], dtype: str, lanes: int) -> Val:
        if not lanes:
            return fn(args)
        args = [self.broadcast(a) for a in args]
        t, st = self.ty(dtype, lanes), llvm_type(dtype)
        vec = "poison"
        for lane in range(lanes):
            xs = [self.op(f"extractelement {self.ty(a.dtype, lanes)} {a.ref}, i32 {lane}", a.dtype)
                  for a in args]
            y = fn(xs)
            vec = self.op(f"insertelement {t} {vec}, {st} {y.ref}, i32 {lane}", dtype, lanes).ref
        return Val(vec, dtype, lanes)


def emit_nvptx_module(f: PrimFunc, target: Target, symbol: str) -> tuple[str, list[tuple[str, Launch]]]:
    """LLVM IR text (NVPTX) for `f` and, per segment, its kernel name and launch."""
    buffers = list(f.params) + list(f.workspaces)
    funcs, info, globals_ = [], [], []
    declared: set[str] = set()
    for k, seg in enumerate(segments(f)):
        name = f"{symbol}_s{k}"
        launch = launch_of(seg, target)
        em = KernelEmitter(name, buffers, seg, launch)
        funcs.append(em.emit())
        globals_ += em.globals
        declared |= em.declared
        info.append((name, launch))
    head = 'target triple = "nvptx64-nvidia-cuda"'
    attrs = "attributes #0 = { nounwind }"
    meta = '!0 = distinct !{!0, !1}\n!1 = !{!"llvm.loop.mustprogress"}'
    text = "\n\n".join([head, *globals_, *sorted(declared), *funcs, attrs, meta]) + "\n"
    return text, info
