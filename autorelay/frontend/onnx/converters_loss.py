"""Training losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (what PyTorch's exporter
writes for `F.nll_loss` and `F.cross_entropy`).

Both pick, at every position, the log-probability of the target class (a `gather` along the class
axis, 1), weight it by its class's weight and negate it. A target equal to `ignore_index` adds
nothing and weighs nothing; it is replaced by class 0 before the gather, because the ignored value
(PyTorch's -100) is usually no class at all. 'mean' divides by the summed weights of the positions
kept (their count when there are no weights), as ONNX defines it, so a batch whose every target is
ignored gives 0/0 = NaN, as ONNX Runtime does. SoftmaxCrossEntropyLoss is `log_softmax` over the
classes followed by the same loss, and its optional second result is that `log_softmax`.
"""

from __future__ import annotations

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)

_REDUCTIONS = ("none", "sum", "mean")


def _nll(g: GraphBuilder, node: NodeView, log_prob: Expr, target: Expr, weight: Expr | None) -> Expr:
    """The negative log-likelihood of `target` under `log_prob` (N, C, d1, ...), reduced as asked."""
    reduction = node.attr("reduction", "mean")
    if reduction not in _REDUCTIONS:
        raise node.fail(f"reduction must be one of {', '.join(_REDUCTIONS)}, got {reduction!r}")
    if g.ndim(log_prob) < 2:
        raise node.fail(f"expects scores of shape (N, C, ...), got {g.shape(log_prob)}")
    if g.ndim(target) != g.ndim(log_prob) - 1:
        raise node.fail(f"target of shape {g.shape(target)} does not match scores {g.shape(log_prob)}: "
                        "the target has every axis of the scores but the class axis 1")
    ignore = node.attr("ignore_index")
    target = g.call("cast", target, dtype="int64")
    kept = None
    if ignore is not None:
        kept = g.call("not_equal", target, g.const(int(ignore), "int64"))
        target = g.call("where", kept, target, g.call("zeros_like", target))
    picked = g.call("gather", log_prob, g.call("expand_dims", target, axis=1), axis=1)
    loss = g.call("negative", g.call("squeeze", picked, axis=[1]))
    w = None if weight is None else g.call("take", weight, target, axis=0)
    if kept is not None:
        zero = g.call("zeros_like", loss)
        w = g.call("cast", kept, dtype=g.dtype(loss)) if w is None else g.call("where", kept, w, zero)
    if w is not None:
        loss = g.call("multiply", loss, w)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return g.call("sum", loss)
    if w is None:
        return g.call("mean", loss)
    return g.call("divide", g.call("sum", loss), g.call("sum", w))


@_reg("NegativeLogLikelihoodLoss")
def _nll_loss(g: GraphBuilder, node: NodeView) -> Expr:
    return _nll(g, node, _x(node, 0), _x(node, 1), node.input(2))


@_reg("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(g: GraphBuilder, node: NodeView) -> Expr:
    scores = _x(node, 0)
    if g.ndim(scores) < 2:
        raise node.fail(f"expects scores of shape (N, C, ...), got {g.shape(scores)}")
    log_prob = g.call("nn.log_softmax", scores, axis=1)
    return [_nll(g, node, log_prob, _x(node, 1), node.input(2)), log_prob]


__all__ = ["TABLE"]
