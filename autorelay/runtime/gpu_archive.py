"""Saving and loading GPU (cuda) kernels inside a saved executable (`executable.save` / `load`).

A GPU kernel travels as the PTX the driver loads (``kernels/K.ptx``), with its segment names and
each segment's launch shape in ``plan.json``; an emulated target's kernel also carries the CPU code
of its emulation (``kernels/K.emu.ll``). Loading hands that back to the NVPTX backend's `load`, so
a loaded executable runs exactly the code that was saved (no LLVM, no ptxas): the driver JIT-
compiles the PTX for the GPU present, as it does for a fresh build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autorelay.codegen.base import BackendCode
from autorelay.codegen.nvptx.ptx import TRIPLE
from autorelay.target import Target


def target_meta(target: Target) -> dict[str, Any]:
    return {"kind": "cuda", "arch": target.arch, "options": dict(target.options), "threads": target.threads}


def target_from_meta(meta: dict[str, Any]) -> Target:
    return Target(cpu=meta["arch"], kind="cuda", threads=int(meta["threads"]), triple=TRIPLE,
                  options=tuple(sorted((str(k), str(v)) for k, v in meta["options"].items())))


def kernel_meta(k: Any) -> dict[str, Any]:
    """plan.json's entry for GPU kernel artifact `k`, beyond the fields every kernel has."""
    return {"launches": [[list(g), list(b)] for g, b in k.launches],
            "emulation_segments": [list(s) for s in k.emulation[1]] if k.emulation else None}


def kernel_files(i: int, k: Any) -> dict[str, bytes]:
    files = {f"kernels/{i}.ptx": k.llvm_ir.encode()}
    if k.emulation:
        files[f"kernels/{i}.emu.ll"] = k.emulation[0].encode()
    return files


def load_kernel(i: int, kd: dict[str, Any], read: Callable[[str], bytes], target: Target) -> Any:
    """A `KernelArtifact` for saved GPU kernel `i` (plan.json entry `kd`), its module loaded."""
    from autorelay.codegen.nvptx.backend import NVPTX_BACKEND, PTXCode
    from autorelay.codegen.nvptx.launch import Launch
    from autorelay.runtime.executable import KernelArtifact

    ptx = read(f"kernels/{i}.ptx").decode()
    segs = [(n, int(p)) for n, p in kd["segments"]]
    launches = [(tuple(g), tuple(b)) for g, b in kd["launches"]]
    emulation = None
    if kd.get("emulation_segments") is not None:
        emulation = (read(f"kernels/{i}.emu.ll").decode(), [(n, int(p)) for n, p in kd["emulation_segments"]])
    code = PTXCode("", tuple(segs), ptx, tuple(Launch(g, b) for g, b in launches),  # type: ignore[arg-type]
                   BackendCode(emulation[0], tuple(emulation[1])) if emulation else None)
    module = NVPTX_BACKEND.load(code, kd["nbuffers"], target, kd["key"], None)
    ws = [(tuple(sh), dt) for sh, dt in kd["workspaces"]]
    return KernelArtifact(kd["key"], ptx, segs, kd["nbuffers"], ws, module, launches, emulation)
