"""Executable behaviour: memory plan, save/load, input checking, reports, schedule sources, errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import autorelay
from autorelay.build_module import BuildError
from autorelay.codegen.llvm.host import host_target
from autorelay.frontend import zoo
from autorelay.runtime.executable import InputError
from autorelay.schedule.source import Lookup
from autorelay.target import TargetError

pytestmark = pytest.mark.cpu

SMALL_NET = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 12, 12), float32], %w1: Tensor[(8, 3, 3, 3), float32],
          %w2: Tensor[(8, 8, 3, 3), float32], %d: Tensor[(10, 288), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2]);
  %3 = nn.conv2d(%2, %w2, padding=[1, 1]);
  %4 = nn.relu(%3);
  %5 = add(%4, %2);
  %6 = nn.batch_flatten(%5);
  %7 = nn.dense(%6, %d);
  (nn.softmax(%7), %6)
}"""


@pytest.fixture(scope="module")
def net():
    mod = autorelay.parse(SMALL_NET)
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((8, 3, 3, 3)).astype("float32") * 0.3,
              "w2": rng.standard_normal((8, 8, 3, 3)).astype("float32") * 0.1,
              "d": rng.standard_normal((10, 288)).astype("float32") * 0.05}
    x = rng.standard_normal((1, 3, 12, 12)).astype("float32")
    want = autorelay.evaluate(mod, x, params["w1"], params["w2"], params["d"])
    return mod, params, x, want, autorelay.build(mod, params=params)


def test_tuple_outputs_match_interpreter(net):
    _, _, x, want, exe = net
    got = exe(x)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    again = exe.run(x=x)  # repeated calls reuse buffers; results are fresh arrays
    np.testing.assert_array_equal(again[0], got[0])
    assert again[0] is not got[0]


def test_nested_tuple_outputs_keep_their_nesting_on_every_executor_and_through_save(tmp_path):
    """A result `(a, (b, c))` (a first-order gradient's `(value, (grads…))` among them) comes back
    nested as the function returns it; the graph executor flattened it to `(a, b, c)`."""
    mod = autorelay.parse('#[version = "0.0.5"]\n'
                          'def @main(%x: Tensor[(2), float32], %y: Tensor[(2), float32]) '
                          '{ (add(%x, 1f), (multiply(%y, 2f), (%x, exp(%y)))) }')
    x, y = np.ones(2, "float32"), np.full(2, 3, "float32")
    want = autorelay.evaluate(mod, x, y)
    graph = autorelay.build(mod, executor="graph")
    path = tmp_path / "nested.arx"
    graph.save(path)
    for exe in (graph, autorelay.load(path), autorelay.build(mod, executor="vm"),
                autorelay.build(mod, executor="aot")):
        got = exe(x, y)
        assert autorelay.runtime.values.values_equal(got, want), (type(exe).__name__, got)
        assert isinstance(got[1], tuple) and isinstance(got[1][1], tuple)


def test_memory_plan_reuses_storage(net):
    exe = net[4]
    temps = [s for s in exe.plan.slots if s.kind == "temp"]
    total = sum(s.nbytes for s in temps)
    storage = exe.plan.memory.storage_bytes
    assert sum(storage) < total  # shared blocks hold less than one buffer per intermediate
    assert len(storage) < len(temps)
    assert exe.peak_memory_bytes == sum(storage) + exe.plan.memory.workspace_bytes
    assert exe.peak_memory_bytes < exe.report.unplanned_bytes
    # no step writes into a block it also reads
    for st in exe.plan.steps:
        ins = {exe.plan.slots[a].index for a in st.args if exe.plan.slots[a].kind == "temp"}
        outs = {exe.plan.slots[o].index for o in st.outputs}
        assert not ins & outs, st.name


def test_bad_input_shape_names_input_and_shapes(net):
    exe = net[4]
    with pytest.raises(InputError, match=r"input 'x': expected shape \(1, 3, 12, 12\).*got \(1, 3, 11, 12\)"):
        exe(np.zeros((1, 3, 11, 12), "float32"))
    with pytest.raises(InputError, match="expected 1 input"):
        exe()
    with pytest.raises(InputError, match="missing"):
        exe.run(y=np.zeros((1, 3, 12, 12), "float32"))


def test_profile_fills_shares(net):
    exe = net[4]
    report = exe.profile(repeat=3)
    shares = [r.share for r in report.rows]
    assert all(s is not None and s >= 0 for s in shares)
    assert abs(sum(shares) - 1.0) < 1e-6
    text = str(report)
    assert "conv2d" in text and "memory: peak" in text


def test_profile_segments_time_each_loop_nest_by_its_stage(net, tmp_path):
    """A blocked conv with a padded copy runs as two loop nests; each is timed and named by the
    stage its outer loop computes, and a saved executable keeps the names. A conv whose input
    its producer wrote with the zero border (`autorelay.te.halo`) runs as one."""
    mod, params, x, _, _ = net
    exe = autorelay.build(mod, params=params, pipeline="nchwc-direct")
    segments = exe.profile_segments(x, repeat=2)
    assert len(segments) == len(exe.report.rows)
    assert all(t > 0 for nests in segments for _, t in nests)
    convs = [(nests, "no padding pass" in row.detail)
             for row, nests in zip(exe.report.rows, segments) if row.name.startswith("conv2d")]
    padding = [nests for nests, bordered in convs if not bordered]
    assert padding and all(len(nests) == 2 and nests[0][0].endswith("_pad") for nests in padding), convs
    assert all(len(nests) == 1 for nests, bordered in convs if bordered), convs
    exe.save(tmp_path / "net.zip")
    again = autorelay.load(tmp_path / "net.zip")
    assert [[n for n, _ in nests] for nests in again.profile_segments(x, repeat=1)] == \
        [[n for n, _ in nests] for nests in segments]
    np.testing.assert_allclose(again(x)[0], exe(x)[0], rtol=1e-6)


def test_threads_do_not_change_results(net):
    _, _, x, _, exe = net
    one = exe(x)
    exe.set_threads(2)
    try:
        two = exe(x)
    finally:
        exe.set_threads(1)
    np.testing.assert_allclose(two[0], one[0], rtol=1e-6)


def test_save_load_round_trip(net, tmp_path):
    _, _, x, want, exe = net
    path = tmp_path / "net.arx"
    exe.save(path)
    loaded = autorelay.load(path)
    for g, w in zip(loaded(x), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert loaded.report.rows[0].workload_key == exe.report.rows[0].workload_key


def test_save_stores_the_object_code_the_kernels_run(net, tmp_path, monkeypatch):
    """`save` writes each kernel's object code as MCJIT loaded it (no second LLVM compile), and a
    save of the loaded executable writes the same bytes again."""
    import zipfile

    from autorelay.codegen.llvm import jit

    *_, exe = net
    monkeypatch.setattr(jit, "_optimize", lambda *a: pytest.fail("a kernel was compiled again"))
    first, second = tmp_path / "a.arx", tmp_path / "b.arx"
    exe.save(first)
    autorelay.load(first).save(second)
    with zipfile.ZipFile(first) as a, zipfile.ZipFile(second) as b:
        objects = [n for n in a.namelist() if n.endswith(".o")]
        assert objects and all(a.read(n) == b.read(n) for n in objects)
        assert all(a.read(f"kernels/{i}.o") == k.module.object_code for i, k in enumerate(exe.kernels))


def test_load_in_fresh_process_uses_object_code(net, tmp_path):
    _, _, x, want, exe = net
    path, xin, out = tmp_path / "net.arx", tmp_path / "x.npy", tmp_path / "y.npy"
    exe.save(path)
    np.save(xin, x)
    code = textwrap.dedent(f"""
        import numpy as np, autorelay, autorelay.kernel as K
        def boom(*a, **k): raise AssertionError("load must not lower or schedule")
        K.compile_kernel = boom
        exe = autorelay.load({str(path)!r})
        assert all(k.module.from_disk for k in exe.kernels)
        np.save({str(out)!r}, exe(np.load({str(xin)!r}))[0])
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    np.testing.assert_allclose(np.load(out), want[0], rtol=1e-5, atol=1e-5)


def _rewrite(src, dst, change):
    """Copy a saved executable, passing each member's bytes through change(name, data)."""
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, change(name, zin.read(name)))


def test_load_verifies_each_file_against_its_sha256(net, tmp_path):
    import hashlib
    import json
    import zipfile

    *_, exe = net
    path = tmp_path / "net.arx"
    exe.save(path)
    with zipfile.ZipFile(path) as z:
        listed = json.loads(z.read("plan.json"))["sha256"]
        members = {n: hashlib.sha256(z.read(n)).hexdigest() for n in z.namelist() if n != "plan.json"}
    assert listed == members and "kernels/0.o" in listed  # every file, hashed as stored

    altered = tmp_path / "altered.arx"
    _rewrite(path, altered, lambda n, d: d[:-1] + bytes([d[-1] ^ 1]) if n == "kernels/0.o" else d)
    with pytest.raises(autorelay.AutoRelayError, match=r"kernels/0\.o does not match the SHA-256") as info:
        autorelay.load(altered)
    assert "\n" not in str(info.value)

    unlisted = tmp_path / "unlisted.arx"

    def drop_hashes(name, data):
        if name != "plan.json":
            return data
        meta = json.loads(data)
        del meta["sha256"]
        return json.dumps(meta).encode()

    _rewrite(path, unlisted, drop_hashes)
    with pytest.raises(autorelay.AutoRelayError, match="lists no SHA-256"):
        autorelay.load(unlisted)


def test_load_rejects_other_files(tmp_path):
    bad = tmp_path / "bad.arx"
    bad.write_bytes(b"not a zip")
    with pytest.raises(autorelay.AutoRelayError, match="not a saved AutoRelay executable"):
        autorelay.load(bad)


def test_load_names_a_missing_file_and_a_damaged_member(net, tmp_path):
    """A saved executable with one byte flipped inside a stored member fails its CRC; load says
    which member is damaged instead of raising zipfile's error."""
    _, _, _, _, exe = net
    path = tmp_path / "net.arx"
    exe.save(path)
    data = bytearray(path.read_bytes())
    start = data.find(b"consts.npz") + 200  # inside the stored (uncompressed) constants
    data[start] ^= 0xFF
    damaged = tmp_path / "damaged.arx"
    damaged.write_bytes(bytes(data))
    with pytest.raises(autorelay.AutoRelayError, match=r"consts\.npz (is damaged|does not match)"):
        autorelay.load(damaged)
    with pytest.raises(autorelay.AutoRelayError, match=r"missing\.arx: no such file"):
        autorelay.load(tmp_path / "missing.arx")


class _Lookup:
    """A plain schedule source: one logged config for one workload, nothing else."""

    def __init__(self, key: str, config: dict, kind: str) -> None:
        self.key, self.config, self.kind = key, config, kind
        self.asked: list[tuple[str, str]] = []

    def lookup(self, key: str, target: str, workload: dict | None = None) -> Lookup:
        self.asked.append((key, target))
        return Lookup(self.config, self.kind) if key == self.key else Lookup(None)


@pytest.mark.parametrize("kind", ["exact", "transferred"])
def test_logged_configs_are_used_and_reported(net, kind):
    mod, params, x, want, exe = net
    dense = next(r for r in exe.report.rows if r.name.startswith("dense"))
    config = {"template": "dense", "knobs": {"tile_m": 1, "tile_n_vectors": 1, "outer": "m", "unroll_k": 2}}
    source = _Lookup(dense.workload_key, config, kind)
    tuned = autorelay.build(mod, params=params, schedules=source)
    row = next(r for r in tuned.report.rows if r.name.startswith("dense"))
    assert row.source == {"exact": "tuned", "transferred": "transferred"}[kind]
    assert "'unroll_k': 2" in row.detail
    assert {r.source for r in tuned.report.rows if r.kind == "kernel" and r is not row} == {"default"}
    assert all(t == str(tuned.target) for _, t in source.asked)
    np.testing.assert_allclose(tuned(x)[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("knobs", [
    {"tile_m": 1, "tile_n_vectors": 1, "outer": "m"},  # logged before a knob existed
    {"tile_m": 1, "tile_n_vectors": 1, "outer": "diagonal", "unroll_k": 2},  # a value it never takes
])
def test_a_logged_config_the_template_no_longer_takes_falls_back_to_the_default(net, knobs):
    mod, params, x, want, exe = net
    dense = next(r for r in exe.report.rows if r.name.startswith("dense"))
    source = _Lookup(dense.workload_key, {"template": "dense", "knobs": knobs}, "exact")
    tuned = autorelay.build(mod, params=params, schedules=source)
    row = next(r for r in tuned.report.rows if r.name.startswith("dense"))
    assert row.source == "default" and row.detail.startswith("logged config rejected")
    np.testing.assert_allclose(tuned(x)[0], want[0], rtol=1e-5, atol=1e-5)


def test_the_tuning_log_source_plugs_in_directly(net, tmp_path):
    """A tuning_db schedule source bound to the tuning name of the build's target answers build's
    lookups: one name on both sides, no adapter."""
    import tuning_db

    mod, params, x, want, exe = net
    dense = next(r for r in exe.report.rows if r.name.startswith("dense"))
    config = {"template": "dense", "knobs": {"tile_m": 1, "tile_n_vectors": 1, "outer": "m", "unroll_k": 2}}
    db = tuning_db.open(f"sqlite:///{tmp_path / 'log.sqlite'}")
    name = str(host_target(2))
    db.record(dense.workload_key, name, config, [1e-4, 1.1e-4])
    tuned = autorelay.build(mod, params=params, schedules=db.schedule_source(name), threads=2)
    row = next(r for r in tuned.report.rows if r.name.startswith("dense"))
    assert row.source == "tuned" and "'unroll_k': 2" in row.detail
    np.testing.assert_allclose(tuned(x)[0], want[0], rtol=1e-5, atol=1e-5)


def test_fallback_kernels_are_reported(tmp_path):
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(4, 9), float32]) {
  %0 = sin(%x);
  %1 = exp(%0);
  argsort(%1, axis=1)
}""")
    x = np.random.default_rng(1).standard_normal((4, 9)).astype("float32")
    exe = autorelay.build(mod)
    np.testing.assert_array_equal(exe(x), autorelay.evaluate(mod, x))
    # sin and exp fuse into one compiled kernel (sin has a compute); argsort has none
    assert [r.source for r in exe.report.rows] == ["default", "fallback"]
    assert "argsort" in exe.report.rows[1].detail and "argsort" not in exe.report.rows[0].detail
    exe.save(tmp_path / "fb.arx")  # fallback functions travel as Relay text
    np.testing.assert_array_equal(autorelay.load(tmp_path / "fb.arx")(x), exe(x))


def test_functions_over_empty_inputs_are_reported_apart_from_fallbacks():
    """A function whose inputs have no elements has no kernel (kernels take no empty buffers) and
    its reference reads nothing: source `empty`, not a fallback. One that reads a tensor with
    elements as well is still a fallback."""
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%e: Tensor[(0, 3), float32], %x: Tensor[(2, 3), float32]) {
  %0 = sum(%e, axis=[0]);
  %1 = concatenate((%e, %x), axis=0);
  (%0, %1)
}""")
    args = np.zeros((0, 3), "float32"), np.random.default_rng(2).standard_normal((2, 3)).astype("float32")
    exe = autorelay.build(mod)
    for got, want in zip(exe(*args), autorelay.evaluate(mod, *args), strict=True):
        np.testing.assert_array_equal(got, want)
    assert {r.name: r.source for r in exe.report.rows} == {"sum": "empty", "concatenate": "fallback"}
    assert [r.name for r in exe.report.fallbacks] == ["concatenate"]
    assert "empty: 1, fallback: 1" in str(exe.report)


def test_a_fallback_with_a_tuple_parameter_rebuilds_it_from_the_tensors_passed_in_turn():
    """The graph executor passes a kernel its tensors one by one, a tuple parameter's fields in
    turn; the VM passes the tuple. The fallback must rebuild it, not take its first field."""
    from autorelay.runtime.fallback import ReferenceFunction

    fn = autorelay.parse("""#[version = "0.0.5"]
def @main(%p: (Tensor[(1, 2), float32], (Tensor[(1, 3), float32], Tensor[(1, 1), float32])), %s: float32) {
  %0 = %p.1;
  %1 = (%p.0, %0.0, %0.1);
  multiply(concatenate(%1, axis=1), %s)
}""")["main"]
    a, b, c = (np.arange(n, dtype="float32").reshape(1, n) + n for n in (2, 3, 1))
    s = np.float32(2.0)
    want = np.concatenate([a, b, c], axis=1) * s
    np.testing.assert_array_equal(ReferenceFunction(fn, flat_args=True)(a, b, c, s), want)
    np.testing.assert_array_equal(ReferenceFunction(fn)((a, (b, c)), s), want)


@pytest.mark.parametrize("threads", [1, 2])
def test_kernels_around_a_python_step_run_in_order_on_fresh_inputs(threads):
    """The graph executor runs its kernels as native programs that stop at each Python step (here
    the fallback argsort): every call, on new input arrays read in place, equals the interpreter."""
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(64, 33), float32]) {
  %0 = sin(%x);
  %1 = argsort(%0, axis=1);
  %2 = cast(%1, dtype="float32");
  %3 = multiply(%2, %0);
  nn.relu(%3)
}""")
    exe = autorelay.build(mod)
    exe.set_threads(threads)
    assert [r.source for r in exe.report.rows] == ["default", "fallback", "default"]
    rng = np.random.default_rng(3)
    for _ in range(5):
        x = rng.standard_normal((64, 33)).astype("float32")
        np.testing.assert_allclose(exe(x), autorelay.evaluate(mod, x), rtol=1e-6, atol=1e-6)


def test_a_kernel_whose_default_schedule_fails_runs_its_reference_in_every_executor(monkeypatch):
    """The one compile path's last resort: when not even the heuristic default schedules, the graph
    executor and the VM run that function's NumPy references (reported), and AoT says it cannot."""
    import autorelay.primitive as primitive
    from autorelay.errors import ScheduleError
    from autorelay.runtime.aot import AotError

    real = primitive.compile_kernel

    def refuse_exp(cdef, config, target, **kw):
        if any(t.op is not None and "exp" in str(t.op.body) for t in cdef.outputs):
            raise ScheduleError("no legal schedule (injected)")
        return real(cdef, config, target, **kw)

    monkeypatch.setattr(primitive, "compile_kernel", refuse_exp)
    mod = autorelay.parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(4, 9), float32]) { exp(%x) }')
    x = np.random.default_rng(2).standard_normal((4, 9)).astype("float32")
    for executor in ("graph", "vm"):
        exe = autorelay.build(mod, executor=executor)
        np.testing.assert_allclose(exe(x), np.exp(x), rtol=1e-6, err_msg=executor)
        (row,) = exe.report.rows
        assert row.source == "fallback" and "default schedule failed" in row.detail, executor
    with pytest.raises(AotError, match="cannot be scheduled"):
        autorelay.build(mod, executor="aot")


def test_control_flow_goes_to_the_vm():
    mod, params = zoo.get("rnn", seq_len=3, input_size=8, hidden=4)
    with pytest.raises(BuildError, match="graph executor runs dataflow programs only"):
        autorelay.build(mod, params=params, executor="graph")
    xs = np.random.default_rng(0).standard_normal((3, 1, 8)).astype("float32")
    want = autorelay.evaluate(mod, xs, *(params[p.name_hint] for p in mod["main"].params[1:]))
    for executor in ("auto", "vm", "aot"):
        exe = autorelay.build(mod, params=params, executor=executor)
        np.testing.assert_allclose(exe(xs), want, rtol=1e-5, atol=1e-6, err_msg=executor)


def test_unknown_target_is_an_error():
    mod = autorelay.parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) { exp(%x) }')
    with pytest.raises(TargetError, match="unknown kind 'opencl'; known: llvm, cuda, vta"):
        autorelay.build(mod, target="opencl")
    with pytest.raises(TargetError, match="unknown device"):
        autorelay.build(mod, target="cuda -device=opencl")
    with pytest.raises(TargetError, match="unknown kind 'opencl'"):
        autorelay.build(mod, target="opencl")


def test_engines_can_be_released(tmp_path):
    """Each kernel's JIT engine owns its own TargetMachine: dropping executables and clearing the
    kernel cache must not double-free (a crash), and loaded kernels likewise."""
    (tmp_path / "net.relay").write_text(SMALL_NET)
    code = textwrap.dedent(f"""
        import gc, numpy as np, autorelay
        from autorelay.codegen.llvm.jit import clear_memory_cache
        mod = autorelay.parse(open({str(tmp_path / "net.relay")!r}).read())
        rng = np.random.default_rng(0)
        params = {{p.name_hint: rng.standard_normal(p.type_annotation.concrete_shape).astype("float32")
                   for p in mod["main"].params if p.name_hint != "x"}}
        exe = autorelay.build(mod, params=params)
        exe.save({str(tmp_path / "n.arx")!r})
        del exe; gc.collect(); clear_memory_cache(); gc.collect()
        exe = autorelay.load({str(tmp_path / "n.arx")!r})
        del exe; gc.collect(); clear_memory_cache(); gc.collect()
        print("released")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "released" in done.stdout, done.stderr[-2000:]
