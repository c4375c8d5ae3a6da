"""Realize: rewrite a prepared float graph into qnn ops, following a plan and a calibration.

Each int8 layer becomes one fused epilogue (the spec's kernel):

    qnn.requantize(nn.bias_add(qnn.conv2d(x_u8, w_s8, zp_x, 0, s_x, s_w), b_i32),
                   s_x * s_w, 0, s_out, zp_out, axis=1, out_dtype="uint8")   [then clip for relu6]

Weights are symmetric int8 per output channel (`s_w[c] = max|w[c]| / qmax`, zero point 0; qmax 127,
or 63 in the `cpu-narrow` scheme), the
bias int32 at the accumulator's scale `s_x * s_w[c]`, activations asymmetric uint8 with a zero
point, so a ReLU is the requantize's saturation at `zp_out = 0` and a ReLU6 a clip at the upper
level. Values stay int8 between int8 ops: a layer's output feeds the next int8 layer, a qnn.add /
qnn.concatenate whose inputs are all int8, or an exact data-movement op (max pooling, flatten,
reshape…) without a dequantize / quantize pair. Float enters through `qnn.quantize` where an int8
layer reads a float tensor and leaves through `qnn.dequantize` where a float op (softmax, average
pooling, an fp32 layer) reads an int8 one. A layer whose result is read only by float ops skips
the requantize and dequantizes its int32 accumulator directly (no rounding to 8 bits there).

Which values are int8 is decided before rewriting, in two sweeps over the graph: `avail` (forward:
an int8 value could exist here) and `need` (backward: some int8 consumer reads it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from autorelay.ir.visitor import children, post_order
from autorelay.op.registry import call, get
from autorelay.transform.quantize.annotate import PASSTHROUGH, Annotation, Join, Layer
from autorelay.transform.quantize.calibrate import Calibration
from autorelay.transform.quantize.layers import QuantizePlan
from autorelay.transform.quantize.scheme import CPU_SCHEME, QuantizeScheme
from autorelay.transform.util import op_name


@dataclass(frozen=True, eq=False)
class QValue:
    """An integer tensor `expr` whose real value is `(expr - zero_point) * scale`."""

    expr: Expr
    scale: np.float32
    zero_point: int
    dtype: str


def activation_qparams(lo: float, hi: float) -> tuple[np.float32, int]:
    """uint8 scale and zero point covering [lo, hi] (the `cpu` scheme's)."""
    return CPU_SCHEME.activation_qparams(lo, hi)


def quantize_weight(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per output channel (axis 0): (int8 weight, float32 scales) (the `cpu` scheme's)."""
    return CPU_SCHEME.quantize_weight(w)


def _f32(v) -> Constant:
    return Constant(np.asarray(v, np.float32))


def _i32(v) -> Constant:
    return Constant(np.asarray(v, np.int32))


def _attrs_for(op: str, attrs, **extra) -> dict:
    known = get(op).attrs
    out = {k: v for k, v in attrs.items() if k in known}
    out.update(extra)
    return out


class Realizer:
    def __init__(self, ann: Annotation, calibration: Calibration, plan: QuantizePlan,
                 scheme: QuantizeScheme = CPU_SCHEME) -> None:
        self.ann, self.cal, self.plan, self.scheme = ann, calibration, plan, scheme
        self.int8_layers = {id(layer.out): layer for layer in ann.layers.values()
                            if plan.precision(layer.name) == "int8" and not layer.unsupported}
        self.layer_by_call = {id(layer.call): layer for layer in self.int8_layers.values()}
        self.join_by_out = {id(j.out): j for j in ann.joins.values()}
        self.join_by_input_holder = {id(j.call if op_name(j.call) == "add" else j.call.args[0]): j
                                     for j in ann.joins.values()}
        self.order = post_order(ann.fn.body, lambda e: [] if isinstance(e, Function) else children(e))
        self.avail: dict[int, bool] = {}
        self.need: dict[int, bool] = {}
        self.res: dict[int, Expr | QValue] = {}
        self._deq: dict[int, Expr] = {}
        self._quant: dict[tuple, QValue] = {}
        self.weights: dict[int, str] = {}  # id(Constant) -> parameter name for the lifted weights
        self._decide()

    # ---- which values are int8 ------------------------------------------------------------

    def _decide(self) -> None:
        for n in self.order:
            if id(n) in self.int8_layers:
                self.avail[id(n)] = True
            elif id(n) in self.join_by_out:
                self.avail[id(n)] = all(self.avail.get(id(i), False) for i in self.join_by_out[id(n)].inputs)
            elif op_name(n) in PASSTHROUGH:
                self.avail[id(n)] = self.avail.get(id(n.args[0]), False)  # type: ignore[union-attr]
        for n in reversed(self.order):
            if not self.avail.get(id(n), False):
                continue
            self.need[id(n)] = any(self._reads_int8(p, n) for p in self.ann.uses.get(id(n), []))

    def _join_int8(self, j: Join) -> bool:
        return all(self.avail.get(id(i), False) for i in j.inputs) and self.need.get(id(j.out), False)

    def _reads_int8(self, parent: Expr, n: Expr) -> bool:
        if id(parent) in self.layer_by_call and parent.args[0] is n:  # type: ignore[union-attr]
            return True
        j = self.join_by_input_holder.get(id(parent))
        if j is not None:
            return self._join_int8(j)
        if op_name(parent) in PASSTHROUGH and id(parent) not in self.int8_layers:
            return self.avail.get(id(parent), False) and self.need.get(id(parent), False)
        return False

    # ---- value conversions ----------------------------------------------------------------

    def qparams(self, point: str) -> tuple[np.float32, int]:
        return self.scheme.activation_qparams(*self.cal.range(point))

    def as_float(self, r: Expr | QValue) -> Expr:
        if not isinstance(r, QValue):
            return r
        hit = self._deq.get(id(r))
        if hit is None:
            hit = call("qnn.dequantize", r.expr, _f32(r.scale), _i32(r.zero_point))
            self._deq[id(r)] = hit
        return hit

    def as_quant(self, node: Expr, point: str) -> QValue:
        r = self.res[id(node)]
        if isinstance(r, QValue):
            return r
        scale, zp = self.qparams(point)
        key = (id(r), float(scale), zp)
        if key not in self._quant:
            dtype = self.scheme.activation_dtype
            q = call("qnn.quantize", r, _f32(scale), _i32(zp), out_dtype=dtype)
            self._quant[key] = QValue(q, scale, zp, dtype)
        return self._quant[key]

    def activate(self, q: QValue, act: Call | None) -> QValue:
        """ReLU / clip on a quantized value: a clip at the quantized bounds (none when a no-op)."""
        if act is None:
            return q
        if op_name(act) == "nn.relu":
            lo, hi = 0.0, np.inf
        else:
            lo, hi = float(act.attrs["a_min"]), float(act.attrs["a_max"])

        qmin, qmax = self.scheme.qmin, self.scheme.qmax

        def level(v: float) -> int:
            if not np.isfinite(v):
                return qmin if v < 0 else qmax
            return int(np.clip(q.zero_point + np.round(v / float(q.scale)), qmin, qmax))

        qlo, qhi = level(lo), level(hi)
        if qlo <= qmin and qhi >= qmax:
            return q
        clipped = call("clip", q.expr, a_min=float(qlo), a_max=float(qhi))
        return QValue(clipped, q.scale, q.zero_point, q.dtype)

    # ---- rewriting --------------------------------------------------------------------------

    def run(self) -> Function:
        for n in self.order:
            self.res[id(n)] = self._realize(n)
        body = self.res[id(self.ann.fn.body)]
        return Function(self.ann.fn.params, self.as_float(body))

    def _realize(self, n: Expr) -> Expr | QValue:
        if isinstance(n, Var | Constant | Op):
            return n
        if id(n) in self.int8_layers:
            return self._layer(self.int8_layers[id(n)])
        j = self.join_by_out.get(id(n))
        if j is not None and self._join_int8(j):
            return self._join(j)
        if isinstance(n, Tuple):
            fields = tuple(self.as_float(self.res[id(f)]) for f in n.fields)
            return n if all(a is b for a, b in zip(fields, n.fields)) else Tuple(fields)
        if isinstance(n, TupleGetItem):
            v = self.as_float(self.res[id(n.tuple_value)])
            return n if v is n.tuple_value else TupleGetItem(v, n.index)
        if not isinstance(n, Call):
            raise ValueError(f"quantize: {type(n).__name__} nodes are not supported (dataflow graphs only)")
        if op_name(n) in PASSTHROUGH and self.need.get(id(n), False):
            q = self.res[id(n.args[0])]
            if isinstance(q, QValue):
                if op_name(n) in ("nn.relu", "clip"):
                    return self.activate(q, n)
                return QValue(n.replace(args=(q.expr, *n.args[1:])), q.scale, q.zero_point, q.dtype)
        args = tuple(self.as_float(self.res[id(a)]) for a in n.args)
        return n if all(a is b for a, b in zip(args, n.args)) else n.replace(args=args)

    def _layer(self, layer: Layer) -> Expr | QValue:
        c = layer.call
        x = self.as_quant(c.args[0], f"{layer.name}:in")
        w = np.asarray(c.args[1].data)  # type: ignore[union-attr]
        qw, w_scale = self.scheme.quantize_weight(w)
        qw_c = Constant(qw)
        self.weights[id(qw_c)] = f"{layer.name}_weight"
        acc_scale = (np.float32(x.scale) * w_scale).astype(np.float32)
        args = (x.expr, qw_c, _i32(x.zero_point), _i32(0), _f32(x.scale), _f32(w_scale))
        if layer.kind == "conv2d":
            acc: Expr = call("qnn.conv2d", *args, **_attrs_for("qnn.conv2d", c.attrs, out_dtype="int32"))
        else:
            acc = call("qnn.dense", *args, **_attrs_for("qnn.dense", c.attrs, out_dtype="int32"))
        if layer.bias is not None:
            b = np.round(layer.bias / acc_scale.astype(np.float64))
            b_c = Constant(np.clip(b, -(2 ** 31) + 1, 2 ** 31 - 1).astype(np.int32))
            self.weights[id(b_c)] = f"{layer.name}_bias"
            acc = call("nn.bias_add", acc, b_c, axis=layer.axis)
        if not self.need.get(id(layer.out), False):  # read only in float: skip the 8-bit rounding
            out = call("qnn.dequantize", acc, _f32(acc_scale), _i32(0), axis=layer.axis)
            act = layer.activation
            return out if act is None else act.replace(args=(out, *act.args[1:]))
        scale, zp = self.qparams(f"{layer.name}:out")
        q = call("qnn.requantize", acc, _f32(acc_scale), _i32(0), _f32(scale), _i32(zp), axis=layer.axis,
                 rounding="UPWARD", out_dtype=self.scheme.activation_dtype)
        return self.activate(QValue(q, scale, zp, self.scheme.activation_dtype), layer.activation)

    def _join(self, j: Join) -> QValue:
        ins = [self.res[id(i)] for i in j.inputs]
        assert all(isinstance(q, QValue) for q in ins)
        scale, zp = self.qparams(f"{j.name}:out")
        if op_name(j.call) == "add":
            a, b = ins
            e = call("qnn.add", a.expr, b.expr, _f32(a.scale), _i32(a.zero_point),  # type: ignore[union-attr]
                     _f32(b.scale), _i32(b.zero_point), _f32(scale), _i32(zp))  # type: ignore[union-attr]
        else:
            e = call("qnn.concatenate", Tuple(tuple(q.expr for q in ins)),  # type: ignore[union-attr]
                     Tuple(tuple(_f32(q.scale) for q in ins)), Tuple(tuple(_i32(q.zero_point) for q in ins)),  # type: ignore[union-attr]
                     _f32(scale), _i32(zp), axis=j.call.attrs["axis"])
        return self.activate(QValue(e, scale, zp, self.scheme.activation_dtype), j.activation)


def realize(ann: Annotation, calibration: Calibration, plan: QuantizePlan,
            scheme: QuantizeScheme = CPU_SCHEME) -> tuple[Function, dict[int, str]]:
    """The quantized function and the names of its weight constants (id -> name)."""
    r = Realizer(ann, calibration, plan, scheme)
    return r.run(), r.weights
