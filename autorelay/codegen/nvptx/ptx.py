"""NVPTX LLVM IR -> PTX with llvmlite, libdevice linked in; and `ptxas`, to check that PTX
assembles for a real architecture without a GPU (registers, spills).

libdevice (`libdevice.10.bc`) and ptxas come from the pip wheel `nvidia-cuda-nvcc-cu12` or a CUDA
toolkit in /usr/local/cuda; `toolkit_file` finds them (None when absent).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import llvmlite.binding as llvm

from autorelay.codegen.llvm.host import init_llvm
from autorelay.errors import AutoRelayError

TRIPLE = "nvptx64-nvidia-cuda"


class PTXError(AutoRelayError, RuntimeError):
    """PTX could not be produced or assembled (the message carries LLVM's or ptxas's words)."""


def _roots() -> list[str]:
    roots = []
    try:
        import nvidia.cuda_nvcc as wheel  # the pip wheel nvidia-cuda-nvcc-cu12 (optional)

        roots += list(wheel.__path__)
    except ImportError:
        pass
    return roots + ["/usr/local/cuda"]


@functools.cache
def toolkit_file(relpath: str) -> str | None:
    """`nvvm/libdevice/libdevice.10.bc` or `bin/ptxas` from the wheel or a CUDA toolkit."""
    for root in _roots():
        p = os.path.join(root, relpath)
        if os.path.exists(p):
            return p
    return None


def libdevice_path() -> str | None:
    return toolkit_file("nvvm/libdevice/libdevice.10.bc")


def ptxas_path() -> str | None:
    return toolkit_file("bin/ptxas")


@functools.cache
def _machine(arch: str) -> llvm.TargetMachine:
    init_llvm()
    return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=arch, opt=3)


@functools.cache
def _libdevice_bitcode() -> bytes:
    path = libdevice_path()
    if path is None:
        raise PTXError("this kernel calls math functions, which on NVIDIA GPUs come from libdevice, "
                       "and libdevice.10.bc was not found: pip install nvidia-cuda-nvcc-cu12")
    with open(path, "rb") as fh:
        return fh.read()


def compile_ptx(text: str, arch: str, kernels: list[str]) -> str:
    """PTX for the NVPTX module `text` (kernels named `kernels`) on `arch` (e.g. `sm_90`)."""
    tm = _machine(arch)
    mod = llvm.parse_assembly(text)
    mod.triple = TRIPLE
    mod.data_layout = str(tm.target_data)
    if "@__nv_" in text:
        lib = llvm.parse_bitcode(_libdevice_bitcode())
        lib.triple, lib.data_layout = TRIPLE, str(tm.target_data)
        mod.link_in(lib)
        for f in mod.functions:  # only the kernels stay visible: the rest inlines or is dropped
            if not f.is_declaration and f.name not in kernels:
                f.linkage = "internal"
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)


@dataclass(frozen=True)
class PtxasReport:
    """What `ptxas -v` says of each kernel: registers, spill stores/loads, shared memory bytes."""

    kernels: dict[str, dict[str, int]]


def run_ptxas(ptx: str, arch: str) -> PtxasReport:
    """Assemble `ptx` for `arch` with ptxas (PTXError with its messages if it fails)."""
    exe = ptxas_path()
    if exe is None:
        raise PTXError("ptxas not found: pip install nvidia-cuda-nvcc-cu12")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as fh:
            fh.write(ptx)
        res = subprocess.run([exe, f"-arch={arch}", "-v", src, "-o", os.path.join(d, "k.cubin")],
                             capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise PTXError(f"ptxas -arch={arch} failed:\n{res.stderr}")
    kernels: dict[str, dict[str, int]] = {}
    name = None
    for line in res.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            name = m.group(1)
            kernels[name] = {"registers": 0, "spill_stores": 0, "spill_loads": 0, "shared": 0}
        elif name is not None:
            k = kernels[name]
            if (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
                k["spill_stores"], k["spill_loads"] = int(m.group(1)), int(m.group(2))
            if (m := re.search(r"Used (\d+) registers", line)):
                k["registers"] = int(m.group(1))
            if (m := re.search(r"(\d+) bytes smem", line)):
                k["shared"] = int(m.group(1))
    return PtxasReport(kernels)
