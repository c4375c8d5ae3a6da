"""The CPU as LLVM sees it: host detection, named CPUs, and target machines.

`autorelay.target.Target` is plain data; this module is where a CPU target meets LLVM. A bare
``llvm`` target is the host (`host_target`): LLVM's name for this CPU and its exact feature
string. A named CPU (``llvm -mcpu=znver3``) takes the features our templates and kernels read from
`NAMED_CPUS` — LLVM applies the rest of that CPU's defaults from its name — so a test or a user can
compile for an AVX2 or an AVX-512 machine from either (running the code needs the features).
"""

from __future__ import annotations

import functools

import llvmlite.binding as llvm

from autorelay.target import Target, TargetError, TargetSpec

_AVX2 = "+avx,+avx2,+fma,+sse4.2"
_AVX512 = f"{_AVX2},+avx512f,+avx512cd,+avx512bw,+avx512dq,+avx512vl"
# AMD's SSE4A (`insertq`, `extrq`) exists on no Intel CPU, and LLVM uses it for byte inserts when it
# compiles for a Zen: code for `-mcpu=znver3` died with SIGILL on an Intel AVX-512 host that has
# every feature the kernels read. Named Zen CPUs go without it, so their code runs on any host with
# their vector features (what the tests that force both widths rely on).
_NO_AMD_ONLY = ",-sse4a"
# The features AutoRelay's templates and kernels read, per CPU name LLVM knows (LLVM fills in the
# rest of each CPU's features from its name).
NAMED_CPUS = {
    "x86-64": "+sse2",
    "haswell": _AVX2, "broadwell": _AVX2, "skylake": _AVX2,
    "znver1": _AVX2 + _NO_AMD_ONLY, "znver2": _AVX2 + _NO_AMD_ONLY, "znver3": _AVX2 + _NO_AMD_ONLY,
    "alderlake": f"{_AVX2},+avxvnni",
    "skylake-avx512": _AVX512,
    "cascadelake": f"{_AVX512},+avx512vnni",
    "icelake-server": f"{_AVX512},+avx512vnni",
    "sapphirerapids": f"{_AVX512},+avx512vnni,+avx512bf16,+avxvnni",
    "znver4": f"{_AVX512},+avx512vnni,+avx512bf16{_NO_AMD_ONLY}",
    "znver5": f"{_AVX512},+avx512vnni,+avx512bf16,+avxvnni{_NO_AMD_ONLY}",
}


@functools.cache
def init_llvm() -> None:
    """Initialise LLVM once (llvmlite >= 0.50: `initialize()` is gone and raises)."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.cache
def _host() -> tuple[str, str, str]:
    init_llvm()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(), llvm.get_process_triple()


def host_target(threads: int = 1) -> Target:
    """This machine's CPU with `threads` kernel threads."""
    cpu, features, triple = _host()
    return Target(cpu, features, threads, triple)


def resolve_cpu(spec: TargetSpec, threads: int) -> Target:
    """The concrete CPU target a parsed ``llvm …`` string names (see the module docstring)."""
    host = host_target(threads)
    if spec.features is not None:
        return Target(spec.cpu or host.cpu, spec.features, threads, host.triple)
    if spec.cpu is None or spec.cpu == host.cpu:
        if spec.features_hash in (None, host.features_hash()):
            return host
        if spec.cpu is None:
            raise TargetError(f"target -mattr-hash={spec.features_hash} does not match this host's "
                              f"features ({host.features_hash()}); name the CPU with -mcpu")
    if spec.cpu not in NAMED_CPUS:
        raise TargetError(f"target -mcpu={spec.cpu}: features unknown for this CPU name; give them "
                          f"with -mattr=+avx2,+fma,… (named CPUs: {', '.join(sorted(NAMED_CPUS))})")
    named = Target(spec.cpu, NAMED_CPUS[spec.cpu], threads, host.triple)
    if spec.features_hash not in (None, named.features_hash()):
        raise TargetError(f"target -mcpu={spec.cpu} -mattr-hash={spec.features_hash}: the features "
                          f"behind that digest are not known on this machine")
    return named


@functools.cache
def _missing(features: str) -> tuple[str, ...]:
    host = set(host_target().features.split(","))
    return tuple(f[1:] for f in features.split(",") if f.startswith("+") and f not in host)


def missing_features(target: Target) -> tuple[str, ...]:
    """The CPU features code compiled for `target` uses that this host lacks (none: it runs here)."""
    return _missing(target.features)


def host_supports(target: Target) -> bool:
    """Whether code compiled for `target` runs here (every feature it names, the host has)."""
    return not _missing(target.features)


def require_host_supports(target: Target, what: str) -> None:
    """Refuse to run `what`, compiled for `target`, where this CPU lacks its features.

    Why: such code dies of SIGILL on its first wide instruction, which takes the whole process (a
    tuner, a server, a test worker) down with it, and the signal names nothing. Compiling for
    another CPU stays allowed (to save, or to read the assembly); only running it is refused."""
    if target.kind == "cpu" and (missing := missing_features(target)):
        raise TargetError(f"{what} targets -mcpu={target.cpu}, whose code needs {', '.join(missing)}; this "
                          f"host ({host_target().cpu}) lacks them, so it cannot run here. Run it on such a "
                          f"machine, or build for `llvm` (this host)")


@functools.cache
def target_machine(target: Target) -> llvm.TargetMachine:
    """A shared machine for passes and assembly. Never hand it to an execution engine."""
    return new_machine(target)


def new_machine(target: Target) -> llvm.TargetMachine:
    """A machine of one's own: an MCJIT engine takes ownership of (and frees) its machine, so
    sharing one between engines crashes the process once any engine is freed."""
    init_llvm()
    tgt = llvm.Target.from_triple(target.triple or llvm.get_process_triple())
    return tgt.create_target_machine(cpu=target.cpu, features=target.features, opt=3,
                                     codemodel="jitdefault")


__all__ = ["NAMED_CPUS", "host_supports", "host_target", "init_llvm", "missing_features", "new_machine",
           "require_host_supports", "resolve_cpu", "target_machine"]
