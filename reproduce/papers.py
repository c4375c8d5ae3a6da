"""What the reproduced papers report, cited to the section and figure, so each report can set the
paper's figure beside ours. Only figures the papers state in their text or captions are recorded here:
none is estimated, read off a plot, or taken from a secondary source.

Versions read (the full text of each):
- Relay: arXiv:1904.08368v2 (24 Aug 2019). Section numbers are v2's; v1 (Apr 2019) was not read, so
  nothing here comes from it.
- TVM: arXiv:1802.04799v3 (5 Oct 2018), the OSDI 2018 text.
- VTA: arXiv:1807.04188v3 (23 Apr 2019), "A Hardware-Software Blueprint for Flexible Deep Learning
  Specialization" (IEEE Micro 2019); v1, the 2018 technical report, was not read.
- AutoTVM ("Learning to Optimize Tensor Programs", arXiv:1805.08166, NeurIPS 2018): only the abstract
  could be read, and it states no figure, so `autotvm_curves` cites the TVM paper's cost-model result
  and `transfer` has none yet.

Where the paper measured on other hardware than ours (a Titan X/V GPU, an FPGA), `quantity` says so."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reported:
    quantity: str  # what the paper measured, briefly
    value: str  # as the paper states it: "3x", "1.2-2x"
    source: str  # paper, section, figure / table
    ours: str = ""  # the column or figure of our report to compare it with


RELAY = "Relay (arXiv:1904.08368v2)"
TVM = "TVM (OSDI 2018, arXiv:1802.04799v3)"
VTA = "VTA (arXiv:1807.04188v3, IEEE Micro)"

_RELAY_CITE = (
    "J. Roesch, S. Lyubomirsky, M. Kirisame, L. Weber, J. Pollock, L. Vega, Z. Jiang, T. Chen, "
    "T. Moreau, Z. Tatlock. Relay: A High-Level Compiler for Deep Learning. arXiv:1904.08368, 2019."
)
_TVM_CITE = (
    "T. Chen, T. Moreau, Z. Jiang, L. Zheng, E. Yan, M. Cowan, H. Shen, L. Wang, Y. Hu, L. Ceze, "
    "C. Guestrin, A. Krishnamurthy. TVM: An Automated End-to-End Optimizing Compiler for Deep Learning. "
    "OSDI 2018 (arXiv:1802.04799)."
)
_AUTOTVM_CITE = (
    "T. Chen, L. Zheng, E. Yan, Z. Jiang, T. Moreau, L. Ceze, C. Guestrin, A. Krishnamurthy. "
    "Learning to Optimize Tensor Programs. NeurIPS 2018 (arXiv:1805.08166)."
)
_VTA_CITE = (
    "T. Moreau, T. Chen, L. Vega, J. Roesch, E. Yan, L. Zheng, J. Fromm, Z. Jiang, L. Ceze, C. Guestrin, "
    "A. Krishnamurthy. A Hardware-Software Blueprint for Flexible Deep Learning Specialization. "
    "IEEE Micro, 2019 (arXiv:1807.04188; v1: VTA: An Open Hardware-Software Stack for Deep Learning, 2018)."
)

REFERENCES: dict[str, str] = {
    "cnn_comp": f"{_RELAY_CITE} {_TVM_CITE}",
    "rnns": _RELAY_CITE,
    "relay_opt": f"{_RELAY_CITE} {_TVM_CITE}",
    "autotvm_curves": f"{_AUTOTVM_CITE} {_TVM_CITE}",
    "transfer": _AUTOTVM_CITE,
    "quantization": _RELAY_CITE,
    "vta": f"{_VTA_CITE} {_TVM_CITE} {_RELAY_CITE}",
    "gpu": f"{_RELAY_CITE} {_TVM_CITE}",
}

REPORTED: dict[str, tuple[Reported, ...]] = {
    "cnn_comp": (
        Reported("Relay vs NNVM, TensorFlow, TF-XLA, MxNet, PyTorch on DQN, MobileNet, ResNet-18, "
                 "VGG-16, batch 1 (Titan-V GPU)",
                 "on par with NNVM; faster than the other four on every model",
                 f"{RELAY}, Sec. 5.2 (vision), Fig. 6", "tuned vs torch / onnxruntime columns"),
        Reported("TVM end to end vs frameworks on hand-tuned libraries, over the back-ends evaluated",
                 "1.2x-3.8x",
                 f"{TVM}, Sec. 1", "tuned/torch column"),
        Reported("TVM vs TFLite end to end on an ARM Cortex-A53 CPU, three models",
                 "TVM faster on all three", f"{TVM}, Sec. 6.2, Fig. 16", "tuned/torch column"),
    ),
    "rnns": (
        Reported("CharRNN generation, Relay AoT vs PyTorch (CPU)", "1.4x", f"{RELAY}, Sec. 5.2 (NLP), Fig. 6",
                 "char-RNN per sequence, best executor/torch"),
        Reported("TreeLSTM, Relay AoT vs PyTorch (CPU)", "2x", f"{RELAY}, Sec. 5.2 (NLP), Fig. 6",
                 "TreeLSTM per tree, best executor/torch"),
        Reported("GRU, Relay vs MxNet (CPU)", "up to 2.3x", f"{RELAY}, Fig. 6 caption",
                 "GRU per step (our baseline is PyTorch, not MxNet)"),
        Reported("Gluon RNN, Relay (loop, not unrolled) vs MxNet (unrolled)", "MxNet faster",
                 f"{RELAY}, Sec. 5.2 (NLP)", "RNN per step"),
    ),
    "relay_opt": (
        Reported("operator fusion on conv+bn+relu, depthwise conv, RNN and LSTM cells (Titan X)",
                 "up to 1.2-2x", f"{TVM}, Sec. 3, Fig. 4", "+FuseOps step speedup"),
        Reported("pass giving the largest gain when layering passes, Threadripper CPU / Titan-V GPU",
                 "layout alteration on CPU; fusion on GPU", f"{RELAY}, Sec. 5.3, Fig. 5",
                 "per-step speedups (+FuseOps, +layout)"),
        Reported("VGG-16 under the pass ablation", "resistant to most passes (back-to-back convs)",
                 f"{RELAY}, Sec. 5.3, Fig. 5", "VGG-16 row"),
    ),
    "autotvm_curves": (
        Reported("ML cost model vs black-box tuning (GA, random) on a ResNet-18 conv2d, Titan X",
                 "better configurations found much faster", f"{TVM}, Sec. 5.2, Fig. 12",
                 "best-so-far curves; trials to 95% of best"),
        Reported("tree-boosting cost model prediction time", "0.67 ms on average", f"{TVM}, Sec. 5.2", ""),
    ),
    "quantization": (
        Reported("ResNet-18 top-1, fp32 / int8 with int32 accumulation", "70.7% / 69.4%",
                 f"{RELAY}, Sec. 5.4, table", "accuracy column"),
        Reported("MobileNet V2 top-1, fp32 / 8/32 / 8/16", "70.9% / 66.9% / 66.9%",
                 f"{RELAY}, Sec. 5.4, table", "accuracy column"),
        Reported("Inception V3 top-1, fp32 / 16/32 / 8/32", "76.6% / 76.6% / 75.2%",
                 f"{RELAY}, Sec. 5.4, table", "accuracy column"),
        Reported("int8/int16 vs float32 latency, Raspberry Pi 3 and RK3399",
                 "much faster, hardly any accuracy loss", f"{RELAY}, Sec. 5.4, Fig. 3 (left)",
                 "latency per bit plan"),
        Reported("int8/int32 vs float32 latency on some model/platform pairs", "slightly slower",
                 f"{RELAY}, Sec. 5.4, Fig. 3 (left)", "latency per bit plan"),
    ),
    "vta": (
        Reported("peak compute utilisation on ResNet layers, FPGA accelerator, without / with latency "
                 "hiding (virtual threads)", "70% / 88%", f"{TVM}, Sec. 4.4, Fig. 10",
                 "utilisation without / with virtual threads"),
        Reported("offloaded ResNet conv layers, FPGA accelerator vs Cortex-A9", "40x",
                 f"{TVM}, Sec. 6.4, Fig. 21", "ResNet-18 offload speedup (conv layers)"),
        Reported("ResNet-18 end to end, VTA on Pynq-Z1 vs Cortex-A9", "4.4x", f"{VTA}, Sec. 5, Fig. 8",
                 "ResNet-18 offload speedup (end to end)"),
        Reported("ResNet-18 end to end, VTA on Ultra-96 vs Cortex-A53 / vs Mali-T860 GPU", "4.7x / 2.5x",
                 f"{VTA}, Sec. 5, Fig. 8", "ResNet-18 offload speedup (end to end)"),
        Reported("multi-batch vs single-batch accelerator design on an edge FPGA, ResNet-18/34/50/101 "
                 "and TreeLSTM", "multi-batch raises throughput on all; batching pays off for TreeLSTM, "
                 "not ResNet", f"{RELAY}, Sec. 5.4, Fig. 3 (right)", ""),
    ),
    "gpu": (
        Reported("Relay vs NNVM, TensorFlow, TF-XLA, MxNet, PyTorch on vision models, Titan-V",
                 "on par with NNVM; faster than the other four on every model",
                 f"{RELAY}, Sec. 5.2 (vision), Fig. 6", "tuned vs torch columns"),
        Reported("TVM vs MXNet, TensorFlow, TF-XLA end to end, Titan X", "1.6x-3.8x (DQN 3.8x)",
                 f"{TVM}, Sec. 6.1, Fig. 14", "tuned/torch column"),
        Reported("layering passes on GPU: most effective pass", "operator fusion",
                 f"{RELAY}, Sec. 5.3, Fig. 5", "relay_opt steps on the GPU"),
    ),
}


def section(experiment: str) -> str:
    """A Markdown section listing the paper's figures for `experiment` ('' when none are recorded)."""
    rows = REPORTED.get(experiment, ())
    if not rows:
        return ""
    lines = ["## What the paper reports", "", "| quantity | paper | source | compare with |",
             "|---|---|---|---|"]
    lines += [f"| {r.quantity} | {r.value} | {r.source} | {r.ours or '-'} |" for r in rows]
    if experiment in REFERENCES:
        lines += ["", f"Papers: {REFERENCES[experiment]}"]
    return "\n".join(lines) + "\n"


__all__ = ["REFERENCES", "REPORTED", "Reported", "section"]
