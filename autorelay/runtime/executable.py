"""`Executable`: a built model — call it, profile it, save it, load it back without recompiling.

A saved executable is one zip file holding plain data, never pickled closures:

* ``plan.json``      — slots, steps, memory plan, inputs/outputs, target, kernel table;
* ``kernels/K.ll``   — each kernel's LLVM IR, and ``kernels/K.o`` its object code for the target
  (GPU executables: ``kernels/K.ptx``, see `autorelay.runtime.gpu_archive`);
* ``consts.npz``     — constants (weights already packed for their kernels);
* ``functions/F.relay`` — fallback primitive functions as Relay text.

Loading compiles nothing above LLVM: on the same CPU the object code is handed to the JIT through
its object cache (no optimisation, no instruction selection); elsewhere the IR is recompiled.

``plan.json`` lists the SHA-256 of every other file, and `load` refuses a file that is missing from
that list or does not match it: a truncated copy or swapped object file fails with one line instead
of running stray machine code. This is an integrity check, not a signature — whoever can write the
zip can rewrite plan.json too. **A saved executable is code**: load it only from a place you trust,
as you would a shared library.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.codegen.llvm.host import host_target, require_host_supports
from autorelay.codegen.llvm.jit import compile_ir
from autorelay.errors import AutoRelayError
from autorelay.ir.expr import Function
from autorelay.runtime.graph_executor import GraphExecutor, GraphPlan, KernelSpec
from autorelay.runtime.graph_plan import MemoryPlan, Slot, Step
from autorelay.runtime.report import BuildReport
from autorelay.runtime.values import input_array
from autorelay.target import Target

FORMAT = "autorelay-executable"
VERSION = 5  # 2: parallel segments carry a `_job` thunk for the native thread team; 3: SHA-256 per file;
# 4: job thunks claim from per-thread home ranges (`codegen.llvm.parallel`); 5: zero-bordered
# (padded/interior) slots and zero-filled blocks (`autorelay.te.halo`)


class InputError(AutoRelayError, ValueError):
    """Wrong inputs to an executable: names the input and both shapes."""


@dataclass
class KernelArtifact:
    """What the runtime and `save` need of a compiled kernel."""

    key: str
    llvm_ir: str
    segments: list[tuple[str, int]]
    nbuffers: int
    workspaces: list[tuple[tuple[int, ...], str]]
    module: Any = None  # CompiledModule once compiled/loaded (cuda: a GPUModule)
    # cuda kernels: each segment's (grid, block), and an emulated target's (CPU IR, its segments)
    launches: list[tuple[tuple[int, ...], tuple[int, ...]]] = dataclasses.field(default_factory=list)
    emulation: tuple[str, list[tuple[str, int]]] | None = None

    @staticmethod
    def from_kernel(k: Any) -> KernelArtifact:
        ws = [(tuple(b.shape), b.dtype) for b in k.func.workspaces]
        if k.target.kind == "cuda":  # the text is the PTX the module was loaded from
            code = k.code.code
            emu = (code.emulation.text, list(code.emulation.segments)) if code.emulation else None
            return KernelArtifact(k.code.key, code.ptx, list(code.segments), len(k.func.params) + len(ws), ws,
                                  k.module, [(la.grid, la.block) for la in code.launches], emu)
        nbuf = len(k.func.params) + len(ws)
        return KernelArtifact(k.module.key, k.module.llvm_ir, list(k.code.code.segments), nbuf, ws, k.module)

    def spec(self) -> KernelSpec:
        return KernelSpec(self.key, self.workspaces, list(self.module.functions), list(self.module.jobs))


class Executable:
    """A compiled model. Calls share preallocated buffers, so one executable runs one call at a time
    (build or load another for concurrent callers)."""

    def __init__(self, plan: GraphPlan, kernels: Sequence[KernelArtifact], consts: Sequence[np.ndarray],
                 functions: Sequence[Function], references: Sequence[Any], target: Target) -> None:
        self.plan, self.kernels, self.consts = plan, list(kernels), list(consts)
        self.functions, self.target = list(functions), target
        self._executor: Any
        if target.kind == "cuda":
            from autorelay.codegen.nvptx.backend import open_device
            from autorelay.runtime.gpu_executor import GPUGraphExecutor

            self._executor = GPUGraphExecutor(plan, [k.module for k in self.kernels],
                                              [k.workspaces for k in self.kernels], self.consts, references,
                                              open_device(target))
        else:
            self._executor = GraphExecutor(plan, [k.spec() for k in self.kernels], self.consts, references,
                                           target.threads)
        self.report = BuildReport.from_plan(plan, self.const_bytes)

    # ---- running ---------------------------------------------------------------------------

    @property
    def input_names(self) -> list[str]:
        return list(self.plan.input_names)

    @property
    def threads(self) -> int:
        return self._executor.threads

    def set_threads(self, threads: int) -> None:
        self._executor.set_threads(threads)
        self.target = self.target.with_threads(threads)

    def _check(self, args: Sequence[Any]) -> list[np.ndarray]:
        names = self.plan.input_names
        if len(args) != len(names):
            raise InputError(f"expected {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
        out = []
        for name, sid, a in zip(names, self.plan.input_slots, args):
            s = self.plan.slots[sid]
            arr = np.asarray(a)
            if tuple(arr.shape) != s.shape:
                raise InputError(f"input {name!r}: expected shape {s.shape} ({s.dtype}), "
                                 f"got {tuple(arr.shape)}")
            arr, problem = input_array(arr, s.dtype)
            if problem:
                raise InputError(f"input {name!r}: {problem}")
            out.append(arr)
        return out

    def __call__(self, *inputs: Any) -> Any:
        require_host_supports(self.target, "this executable")
        return self._executor.run(self._check(inputs))

    def run(self, **named: Any) -> Any:
        missing = [n for n in self.plan.input_names if n not in named]
        extra = sorted(set(named) - set(self.plan.input_names))
        if missing or extra:
            raise InputError(f"inputs: missing {missing or 'none'}, unknown {extra or 'none'} "
                             f"(expected {', '.join(self.plan.input_names)})")
        return self(*[named[n] for n in self.plan.input_names])

    def profile(self, *inputs: Any, repeat: int = 10) -> BuildReport:
        """Time every step (median of `repeat` runs) and fill the report's time shares.

        Without inputs, random ones of the right shapes are used.
        """
        times = self._executor.profile(self._check(self._or_random(inputs)), repeat)
        self.report.set_times(times)
        return self.report

    def _or_random(self, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        if inputs:
            return inputs
        rng = np.random.default_rng(0)
        return tuple(rng.standard_normal(self.plan.slots[s].shape).astype(self.plan.slots[s].dtype)
                     for s in self.plan.input_slots)

    def profile_segments(self, *inputs: Any, repeat: int = 10) -> list[list[tuple[str, float]]]:
        """Per step of the report, (segment, median seconds) of each loop nest its kernel runs as
        its own call (a padded copy, the three stages of a Winograd convolution, a parallel
        loop); a step that is not a compiled kernel is one entry named by its kind. CPU only;
        without inputs, random ones as for `profile`."""
        if not isinstance(self._executor, GraphExecutor):
            raise TypeError("profile_segments: only CPU executables run their kernels segment by segment")
        times = self._executor.profile_calls(self._check(self._or_random(inputs)), repeat)
        out = []
        for st, secs in zip(self.plan.steps, times):
            names = [n for n, _ in self.kernels[st.kernel].segments] if st.kind == "kernel" else [st.kind]
            out.append(list(zip(names, secs, strict=True)))  # one call per segment
        return out

    def device_ms(self, *inputs: Any, repeat: int = 20) -> float:
        """GPU executables: milliseconds of device time per forward pass, the inputs already on the
        device (what PyTorch's CUDA timings measure); `exe(x)` adds the copies in and out."""
        if self.target.kind != "cuda":
            raise TypeError("device_ms: only GPU (cuda) executables have device time; time exe(x) instead")
        return self._executor.time_ms(self._check(inputs), repeat)

    # ---- memory ------------------------------------------------------------------------------

    @property
    def peak_memory_bytes(self) -> int:
        return self.plan.memory.peak_bytes

    @property
    def const_bytes(self) -> int:
        return sum(int(c.nbytes) for c in self.consts)

    # ---- persistence ------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        from autorelay.runtime import gpu_archive

        plan = self.plan
        gpu = self.target.kind == "cuda"
        offloaded = [st.name for st in plan.steps if st.kind == "external"]
        if offloaded:  # a device layer's program lives in its simulator object, not in the archive
            raise ValueError(f"save: executables with offloaded layers ({offloaded[0]}, …) cannot be saved "
                             "yet; build them again from the model")
        meta = {
            "format": FORMAT, "version": VERSION,
            "target": gpu_archive.target_meta(self.target) if gpu else {
                "cpu": self.target.cpu, "features": self.target.features, "triple": self.target.triple,
                "threads": self.target.threads},
            "slots": [s.to_json() for s in plan.slots],
            "steps": [s.to_json() for s in plan.steps],
            "inputs": plan.input_names, "input_slots": plan.input_slots,
            "outputs": plan.output_slots, "output_is_tuple": plan.output_is_tuple,
            "output_tree": plan.output_tree,
            "memory": {"storage_bytes": plan.memory.storage_bytes,
                       "workspace_bytes": plan.memory.workspace_bytes, "zeroed": plan.memory.zeroed},
            "kernels": [{"key": k.key, "segments": [list(s) for s in k.segments], "nbuffers": k.nbuffers,
                         "workspaces": [[list(sh), dt] for sh, dt in k.workspaces],
                         **(gpu_archive.kernel_meta(k) if gpu else {})} for k in self.kernels],
            "functions": len(self.functions),
        }
        from autorelay.ir.module import IRModule

        buf = io.BytesIO()
        np.savez(buf, *self.consts)
        files: dict[str, bytes] = {"consts.npz": buf.getvalue()}
        for i, k in enumerate(self.kernels):
            if gpu:
                files.update(gpu_archive.kernel_files(i, k))
                continue
            files[f"kernels/{i}.ll"] = k.llvm_ir.encode()
            if k.module.object_code is None:  # compile_ir keeps what MCJIT loaded, so only a bug lands here
                raise AutoRelayError(f"save: kernel {k.key} has no object code")
            files[f"kernels/{i}.o"] = k.module.object_code
        for i, f in enumerate(self.functions):
            files[f"functions/{i}.relay"] = IRModule.from_expr(f).astext().encode()
        meta["sha256"] = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("plan.json", json.dumps(meta))
            for name, data in files.items():
                # float weights barely deflate (7% on ResNet-18) at a cost of seconds: stored as they are
                z.writestr(name, data, zipfile.ZIP_STORED if name == "consts.npz" else None)


def _object_names(key: str, text: str) -> list[str]:
    """File names under which `compile_ir`'s disk cache looks for a kernel's object code.

    Mirrors `autorelay.codegen.llvm.jit` (key + digest of llvmlite version and IR); if that scheme
    changes, loading still works but recompiles the IR (the save/load test notices)."""
    import llvmlite

    digest = hashlib.sha256(f"{llvmlite.__version__}|{text}".encode()).hexdigest()[:16]
    return [f"{key}-{digest}.o", f"{key}.o"]


def _member(z: zipfile.ZipFile, name: str, path: str | os.PathLike) -> bytes:
    """One file of the archive; a missing or damaged one is an AutoRelayError naming it."""
    try:
        return z.read(name)
    except KeyError:
        raise AutoRelayError(f"load: {path} lacks {name}") from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:  # a CRC mismatch, a truncated stream
        raise AutoRelayError(f"load: {path}: {name} is damaged ({e}); refusing to load it") from None


def _verified_reader(z: zipfile.ZipFile, meta: dict, path: str | os.PathLike) -> Callable[[str], bytes]:
    """`read(name)`: a member's bytes, only if plan.json lists it and its SHA-256 matches."""
    digests = meta.get("sha256")
    if not isinstance(digests, dict):
        raise AutoRelayError(f"load: {path} lists no SHA-256 of its files; refusing to load its code")

    def read(name: str) -> bytes:
        want = digests.get(name)
        data = _member(z, name, path)
        if want is None or hashlib.sha256(data).hexdigest() != want:
            raise AutoRelayError(f"load: {path}: {name} does not match the SHA-256 in plan.json "
                                 "(corrupt or altered); refusing to load it")
        return data

    return read


def load(path: str | os.PathLike, threads: int | None = None) -> Executable:
    """Load a saved executable; kernels come from their object code when the CPU matches."""
    from autorelay.runtime.fallback import ReferenceFunction
    from autorelay.text_format import parse

    if not os.path.isfile(path):
        raise AutoRelayError(f"load: {path}: no such file")
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise AutoRelayError(f"load: {path} is not a saved AutoRelay executable ({e})") from None
    with z:
        try:
            meta = json.loads(_member(z, "plan.json", path))
        except ValueError as e:
            raise AutoRelayError(f"load: {path}: plan.json is not valid JSON ({e})") from None
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise AutoRelayError(f"load: {path} has format {meta.get('format')} v{meta.get('version')}, "
                                 f"expected {FORMAT} v{VERSION}")
        read = _verified_reader(z, meta, path)
        npz = np.load(io.BytesIO(read("consts.npz")))
        consts = [npz[f"arr_{i}"] for i in range(len(npz.files))]
        functions = [parse(read(f"functions/{i}.relay").decode())["main"] for i in range(meta["functions"])]
        if meta["target"].get("kind") == "cuda":
            from autorelay.runtime import gpu_archive

            target = gpu_archive.target_from_meta(meta["target"])
            kernels = [gpu_archive.load_kernel(i, kd, read, target) for i, kd in enumerate(meta["kernels"])]
        else:
            target = host_target(threads or meta["target"]["threads"])
            # the kernels' IR names the CPU it was saved for (its function attributes, and intrinsics
            # such as VNNI's): recompiled here, it is still that CPU's code, so this one must run it
            cpu, features = meta["target"]["cpu"], meta["target"]["features"]
            saved = dataclasses.replace(target, cpu=cpu, features=features)
            require_host_supports(saved, f"load: {path}")
            kernels = _load_cpu_kernels(meta, read, target)
    refs = [ReferenceFunction(f, flat_args=True) for f in functions]
    return Executable(_plan(meta), kernels, consts, functions, refs, target)


def _load_cpu_kernels(meta: dict, read: Callable[[str], bytes], host: Target) -> list[KernelArtifact]:
    """Saved CPU kernels: from their object code when this CPU is the one they were built for."""
    same_cpu = (host.cpu, host.features) == (meta["target"]["cpu"], meta["target"]["features"])
    kernels = []
    with tempfile.TemporaryDirectory() as objdir:
        for i, kd in enumerate(meta["kernels"]):
            text = read(f"kernels/{i}.ll").decode()
            if same_cpu:
                obj = read(f"kernels/{i}.o")
                for name in _object_names(kd["key"], text):
                    with open(os.path.join(objdir, name), "wb") as fh:
                        fh.write(obj)
            segs = [(n, int(p)) for n, p in kd["segments"]]
            module = compile_ir(text, segs, kd["nbuffers"], dataclasses.replace(host), kd["key"],
                                objdir if same_cpu else None)  # a TargetMachine per engine (see build)
            for name, _ in segs:
                if not module.engine.get_function_address(name):
                    raise AutoRelayError(f"load: kernel {kd['key']} lacks segment {name}")
            ws = [(tuple(sh), dt) for sh, dt in kd["workspaces"]]
            kernels.append(KernelArtifact(kd["key"], text, segs, kd["nbuffers"], ws, module))
    return kernels


def _plan(meta: dict) -> GraphPlan:
    return GraphPlan([Slot.from_json(s) for s in meta["slots"]], [Step.from_json(s) for s in meta["steps"]],
                     meta["inputs"], meta["input_slots"], meta["outputs"], meta["output_is_tuple"],
                     MemoryPlan(meta["memory"]["storage_bytes"], meta["memory"]["workspace_bytes"],
                                meta["memory"]["zeroed"]), meta.get("output_tree"))
