"""FuseOps with FusionPlan: Relay's default rules, the depth limit, plans as data, and meaning."""

from dataclasses import replace

import numpy as np
import pytest
from transform_nets import NETS, assert_same_outputs, ops, typed

from autorelay.ir import Call, Function, IRModule, TensorType, Tuple, Var, const, post_order
from autorelay.op.registry import OpPattern, call
from autorelay.transform import (
    FuseOps,
    FusionPlan,
    Pipeline,
    candidate_edges,
    fused_edges,
    pipeline,
    primitive_functions,
)
from autorelay.transform.fusion_plan import halos_allowed


def _groups(out: IRModule) -> list[list[str]]:
    """Op names of each primitive function, in the order FuseOps made them (dependency order)."""
    groups = []
    for fn in primitive_functions(out):
        names = [n.op.name for n in post_order(fn) if isinstance(n, Call) and hasattr(n.op, "name")]
        groups.append(sorted(names))
    return groups


def _fuse(body_fn, shape=(1, 4, 6, 6), plan=None):
    x = Var("x", TensorType(shape))
    mod = IRModule.from_expr(Function((x,), body_fn(x)))
    out = FuseOps(plan=plan or FusionPlan.default())(typed(mod))
    assert_same_outputs(mod, out)
    # every op call now lives inside a primitive function
    main_ops = [n for n in post_order(out["main"].body) if isinstance(n, Call) and hasattr(n.op, "name")
                and not any(n is m for f in primitive_functions(out) for m in post_order(f))]
    assert main_ops == []
    return sorted(_groups(out))


W = const(np.random.default_rng(0).standard_normal((4, 4, 3, 3)).astype("float32"))


def conv(x):
    return call("nn.conv2d", x, W, padding=[1, 1], channels=4, kernel_size=[3, 3])


def test_conv_takes_its_elementwise_consumers_but_not_another_conv():
    groups = _fuse(lambda x: call("nn.relu", call("add", conv(call("nn.relu", conv(x))), const(1.0))))
    assert groups == sorted([["nn.conv2d", "nn.relu"], ["add", "nn.conv2d", "nn.relu"]])


def test_injective_chains_and_reductions_with_injective_producers():
    body = lambda x: call("sum", call("transpose", call("exp", call("reshape", x, newshape=[4, 36])),
                                      axes=[1, 0]), axis=[0])
    assert _fuse(body) == [["exp", "reshape", "sum", "transpose"]]
    # a reduction's result does not take the following elementwise op (not in Relay's rules)
    assert _fuse(lambda x: call("exp", call("sum", x, axis=[1]))) == [["exp"], ["sum"]]
    # an injective op after a conv starts a new group
    assert _fuse(lambda x: call("reshape", conv(x), newshape=[4, 36])) == [["nn.conv2d"], ["reshape"]]


def test_a_value_with_two_users_is_not_duplicated_into_both():
    def body(x):
        e = call("exp", x)
        return Tuple((call("negative", e), call("tanh", e)))
    assert _fuse(body) == [["exp"], ["negative"], ["tanh"]]


def _gelu(x):
    """ONNX's exported GELU: x * (1 + erf(x / √2)) * 0.5 reads x twice."""
    inner = call("add", call("erf", call("divide", x, const(2.0 ** 0.5))), const(1.0))
    return call("multiply", call("multiply", x, inner), const(0.5))


def test_a_diamond_closing_inside_a_group_fuses_whole():
    """The conv's output feeds two ops of the GELU; both end up in one group, so does the conv."""
    assert _fuse(lambda x: _gelu(conv(x))) == [["add", "divide", "erf", "multiply", "multiply", "nn.conv2d"]]
    # a diamond of injective ops alone, after a reduction-free chain
    assert _fuse(lambda x: _gelu(call("exp", x))) == [["add", "divide", "erf", "exp", "multiply", "multiply"]]


def test_a_diamond_value_also_read_outside_stays_its_own_kernel():
    def body(x):
        c = conv(x)
        return Tuple((_gelu(c), call("nn.relu", c)))
    groups = _fuse(body)
    assert ["nn.conv2d"] in groups and ["nn.relu"] in groups
    assert ["add", "divide", "erf", "multiply", "multiply"] in groups


def test_tuple_fuses_into_concatenate_with_its_injective_consumers():
    body = lambda x: call("nn.relu", call("concatenate", Tuple((x, call("exp", x))), axis=1))
    groups = _fuse(body)
    assert ["concatenate", "nn.relu"] in groups


def test_max_depth_and_plans_as_data():
    chain = lambda x: call("exp", call("tanh", call("negative", call("sigmoid", x))))
    assert len(_fuse(chain)) == 1
    assert [len(g) for g in _fuse(chain, plan=FusionPlan(max_depth=2))] == [2, 2]
    assert len(_fuse(chain, plan=FusionPlan.none())) == 4
    # switching off one candidate edge splits the chain there
    x = Var("x", TensorType((3,)))
    fn = typed(IRModule.from_expr(Function((x,), chain(x))))["main"]
    edges = candidate_edges(fn)
    assert edges == [(0, 1), (1, 2), (2, 3)]
    plan = FusionPlan.default().without_edges([(1, 2)])
    assert [len(g) for g in _fuse(chain, plan=plan)] == [2, 2]
    assert FusionPlan.from_json(plan.to_json()) == plan
    # rules are data too: forbid conv + elementwise fusion
    no_conv = FusionPlan(frozenset(r for r in FusionPlan().rules if r[0] != OpPattern.OUT_ELEMWISE_FUSABLE))
    assert _fuse(lambda x: call("nn.relu", conv(x)), plan=no_conv) == [["nn.conv2d"], ["nn.relu"]]
    with pytest.raises(ValueError, match="max_depth"):
        FusionPlan(max_depth=0)


def test_a_plan_without_halos_groups_alike_and_marks_the_fused_function():
    """`FusionPlan.halos` changes no grouping: it marks the fused function for the builder, and
    survives the JSON round trip (absent from the JSON when on, as plans stored before it)."""
    body = lambda x: call("nn.relu", conv(call("negative", x)))
    plain = replace(FusionPlan.default(), halos=False)
    assert _fuse(body, plan=plain) == _fuse(body)
    assert FusionPlan.from_json(plain.to_json()) == plain and "halos=False" in repr(plain)
    assert "halos" not in FusionPlan.default().to_json() and "halos" not in repr(FusionPlan.default())
    assert FusionPlan.from_json(FusionPlan.default().to_json()).halos
    x = Var("x", TensorType((1, 4, 6, 6)))
    mod = typed(IRModule.from_expr(Function((x,), body(x))))
    assert not halos_allowed(FuseOps(plan=plain)(mod)["main"])
    assert halos_allowed(FuseOps()(mod)["main"])


def test_prologues_fuse_injective_producers_into_the_kernel_they_feed():
    flip = lambda x: call("transpose", call("negative", x), axes=[0, 1, 3, 2])
    body = lambda x: call("nn.relu", conv(flip(x)))
    assert _fuse(body) == sorted([["negative", "transpose"], ["nn.conv2d", "nn.relu"]])
    assert _fuse(body, plan=FusionPlan.prologues()) == [["negative", "nn.conv2d", "nn.relu", "transpose"]]
    assert repr(FusionPlan.prologues()).startswith("FusionPlan(rules=relay+prologues")
    # the edges it adds, named; switching that edge off gives Relay's grouping back
    x = Var("x", TensorType((1, 4, 6, 6)))
    fn = typed(IRModule.from_expr(Function((x,), body(x))))["main"]
    relay, more = fused_edges(fn, FusionPlan.default()), fused_edges(fn, FusionPlan.prologues())
    added = {e: name for e, name in more.items() if e not in relay}
    assert list(added.values()) == ["transpose -> nn.conv2d"] and set(relay) < set(more)
    assert _fuse(body, plan=FusionPlan.prologues().without_edges(added)) == _fuse(body)
    # a producer two convolutions read is not fused into either (nor duplicated)
    two = lambda x: call("add", conv(flip(x)), conv(call("exp", x)))
    shared = lambda x: (lambda t: call("add", conv(t), conv(t)))(flip(x))
    assert ["negative", "transpose"] in _fuse(shared, plan=FusionPlan.prologues())
    assert len(_fuse(two, plan=FusionPlan.prologues())) == 2  # each conv takes its own producer


def test_copy_shared_gives_each_reading_kernel_its_own_copy():
    flip = lambda x: call("transpose", call("negative", x), axes=[0, 1, 3, 2])
    shared = lambda x: (lambda t: call("add", conv(t), conv(t)))(flip(x))
    copies = replace(FusionPlan.prologues(), copy_shared=True)
    # the transpose is copied into both convolutions; `negative`, now read by both copies, is not
    assert _fuse(shared, plan=copies) == sorted([["negative"], ["nn.conv2d", "transpose"],
                                                 ["add", "nn.conv2d", "transpose"]])
    assert FusionPlan.from_json(copies.to_json()) == copies and "copy_shared" in repr(copies)
    assert "copy_shared" not in FusionPlan.prologues().to_json()
    # nothing is copied for a reader that would not fuse it (Relay's rules take no prologues) ...
    relay_copies = replace(FusionPlan.default(), copy_shared=True)
    assert _fuse(shared, plan=relay_copies) == _fuse(shared)
    # ... nor when a reader is not an anchor
    mixed = lambda x: (lambda t: call("add", conv(t), call("exp", t)))(flip(x))
    assert _fuse(mixed, plan=copies) == _fuse(mixed, plan=FusionPlan.prologues())


def test_a_copied_concatenate_takes_its_own_tuple_so_no_kernel_gets_a_tuple_parameter():
    """A concatenate two convolutions read, copied into each: the tuple of its inputs is copied too,
    so each copy's kernel takes the tuple in and reads the concatenated tensors as parameters (a
    shared tuple node would have been a tuple-typed parameter, which no kernel compiles)."""
    joined = lambda x: (lambda t: call("add", conv(t), conv(t)))(
        call("concatenate", Tuple((call("negative", x), call("exp", x))), axis=1))
    copies = replace(FusionPlan.prologues(), copy_shared=True)
    assert _fuse(joined, shape=(1, 2, 6, 6), plan=copies) == sorted(
        [["exp"], ["negative"], ["concatenate", "nn.conv2d"], ["add", "concatenate", "nn.conv2d"]])
    x = Var("x", TensorType((1, 2, 6, 6)))
    out = FuseOps(plan=copies)(typed(IRModule.from_expr(Function((x,), joined(x)))))
    assert all(isinstance(p.type_annotation, TensorType) for f in primitive_functions(out) for p in f.params)


@pytest.mark.parametrize("net", sorted(NETS))
def test_whole_networks(net):
    mod = typed(NETS[net]())
    out = pipeline("default")(mod)
    prims = primitive_functions(out)
    assert all(f.attrs["Primitive"] == 1 for f in prims)
    assert_same_outputs(mod, out)
    unfused = Pipeline([*pipeline("default").passes[:-1], FuseOps(plan=FusionPlan.none())])(mod)
    n_ops = sum(ops(unfused).values())  # (fused, a split's fields become slices: `split_fields`)
    assert 0 < len(prims) < n_ops  # something fused
    assert len(primitive_functions(unfused)) == n_ops
    if net == "resnet":  # one kernel per conv (with its bias/relu/residual add), plus the head
        convs = [g for g in _groups(out) if "nn.conv2d" in g]
        assert len(convs) == ops(mod)["nn.conv2d"]
        assert all(g.count("nn.conv2d") <= 1 for g in _groups(out))
        assert sum(g.count("add") for g in convs) == ops(out)["add"]  # bias and residual adds fused
