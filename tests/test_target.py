"""Targets: one string form, one canonical printed form (the tuning-log key), host resolution."""

from __future__ import annotations

import pickle

import pytest

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import NAMED_CPUS, host_target
from autorelay.target import Target, TargetError, parse_target


def test_bare_llvm_is_the_host_with_every_core_by_default():
    t = resolve_target("llvm")
    host = host_target(t.threads)
    assert (t.cpu, t.features, t.triple) == (host.cpu, host.features, host.triple)
    assert resolve_target("llvm", 3).threads == 3
    assert resolve_target("llvm -threads=2").threads == 2
    assert resolve_target("llvm -threads=2", 5).threads == 5  # an explicit count wins


def test_printed_form_parses_back_to_the_same_target():
    for text in ["llvm -threads=2", "llvm -mcpu=znver3", "llvm -mcpu=znver5 -threads=4",
                 "llvm -mcpu=haswell -mattr=+avx,+avx2,+fma,+sse4.2"]:  # = haswell's named features
        t = resolve_target(text)
        assert resolve_target(str(t)) == t
        kind, *options = str(t).split()
        assert kind == "llvm" and options == sorted(options) and f"-threads={t.threads}" in options


def test_named_cpus_have_their_vector_width():
    assert resolve_target("llvm -mcpu=znver3").vector_lanes() == 8
    assert resolve_target("llvm -mcpu=znver5").vector_lanes() == 16
    assert resolve_target("llvm -mcpu=znver5").has("avx512vnni")
    assert set(NAMED_CPUS) >= {"haswell", "znver3", "znver5", "skylake-avx512"}


def test_the_key_ignores_threads_and_the_name_does_not():
    a, b = resolve_target("llvm -mcpu=znver3 -threads=1"), resolve_target("llvm -mcpu=znver3 -threads=2")
    assert a.key() == b.key() and str(a) != str(b)
    assert a.without_threads() == b.without_threads()


def test_targets_pickle():
    t = resolve_target("llvm -mcpu=znver5 -threads=2")
    assert pickle.loads(pickle.dumps(t)) == t


@pytest.mark.parametrize("text, match", [
    ("", "empty target"),
    ("opencl", "unknown kind 'opencl'"),
    ("llvm -threads=0", "-threads must be an integer >= 1"),
    ("llvm mcpu=x", "not of the form -name=value"),
    ("llvm -mcpu=pentium9000", "features unknown for this CPU name"),
    ("llvm -frobnicate=1", "unknown option -frobnicate"),
    ("llvm -mcpu=znver3 -mattr-hash=0000000000", "not known on this machine"),
])
def test_bad_target_strings_name_the_bad_part(text, match):
    with pytest.raises(TargetError, match=match):
        resolve_target(text)


def test_other_kinds_parse_but_have_no_backend_yet():
    spec = parse_target("vta -config=pynq")
    assert spec.kind == "vta" and dict(spec.options) == {"config": "pynq"}
    with pytest.raises(TargetError, match="no backend for target kind 'vta'"):
        resolve_target("vta -config=pynq")
    with pytest.raises(TargetError, match="threads must be"):
        Target(threads=0)
