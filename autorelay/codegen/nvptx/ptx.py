"""NVPTX LLVM IR -> PTX with llvmlite, libdevice linked in; and `ptxas`, to check that PTX
assembles for a real architecture without a GPU (registers, spills).

libdevice (`libdevice.10.bc`) and ptxas come from the pip wheel `nvidia-cuda-nvcc-cu12` or a CUDA
toolkit in /usr/local/cuda; `toolkit_file` finds them (None when absent).
"""

from __future__ import annotations

import functools
import hashlib
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
    """What `ptxas -v` says of each kernel (entry function): registers per thread, spill stores and
    loads (bytes), static shared memory (bytes), stack frame (bytes), barriers."""

    kernels: dict[str, dict[str, int]]

    def registers(self, kernel: str) -> int:
        return self.kernels[kernel]["registers"]


_FIELDS = ("registers", "spill_stores", "spill_loads", "shared", "stack", "barriers")
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = {"registers": re.compile(r"Used (\d+) registers"), "barriers": re.compile(r"used (\d+) barriers"),
         "shared": re.compile(r"(\d+) bytes smem")}


def parse_ptxas_verbose(text: str) -> dict[str, dict[str, int]]:
    """Per kernel, the numbers of `ptxas -v` output (ptxas 11 and 12 spell them alike; 12 adds
    "used N barriers", older ones leave it out: 0). Kernels come in any order, each introduced by
    "Compiling entry function '<name>'"; its "Used ..." line follows. A "Function properties for
    <f>" block of a called (non-entry) function is skipped, so its frame is not the kernel's."""
    kernels: dict[str, dict[str, int]] = {}
    entry = props = None
    for line in text.splitlines():
        if (m := _ENTRY.search(line)):
            entry = props = m.group(1)
            kernels[entry] = dict.fromkeys(_FIELDS, 0)
        elif (m := _PROPS.search(line)):
            props = m.group(1) if m.group(1) in kernels else None
        elif (m := _FRAME.search(line)):
            if props is not None:
                k = kernels[props]
                k["stack"], k["spill_stores"], k["spill_loads"] = (int(g) for g in m.groups())
        elif entry is not None and "Used" in line:
            for name, rx in _USED.items():
                if (m := rx.search(line)):
                    kernels[entry][name] = int(m.group(1))
    return kernels


# ptxas costs tens of milliseconds per kernel and the tuner asks about the same PTX more than once
# (features of a config before and after it is built): its reports, keyed by the PTX's digest
_REPORTS: dict[str, PtxasReport] = {}
_REPORTS_MAX = 512


def run_ptxas(ptx: str, arch: str) -> PtxasReport:
    """Assemble `ptx` for `arch` with ptxas (PTXError with its messages if it fails); each PTX text
    and arch is assembled once per process."""
    key = hashlib.sha256(f"{arch}\n{ptx}".encode()).hexdigest()
    if key in _REPORTS:
        return _REPORTS[key]
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
    # ptxas 12 writes -v to stderr; read stdout too, where other versions have written it
    report = PtxasReport(parse_ptxas_verbose(res.stdout + "\n" + res.stderr))
    if len(_REPORTS) >= _REPORTS_MAX:
        _REPORTS.pop(next(iter(_REPORTS)))
    _REPORTS[key] = report
    return report
