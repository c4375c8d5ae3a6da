"""ResNet-18's convolution workloads C1-C12 as the AutoTVM paper names them (Chen et al., NeurIPS
2018, Table 2), built as kernel tuning tasks straight from their shapes.

The tasks are plain float32 NCHW convolutions (`autorelay.te.nn.conv2d_nchw`, no bias or ReLU fused),
tuned with the direct NCHW template (`conv2d_nchw`): the compute and template a built model's
stride-2 and 7x7 convolutions use, and the one whose space (10^3-10^5 points per layer, mostly poor)
makes the comparison of search strategies meaningful. Every workload, 1x1 and stride-1 3x3 ones
included, gets this same template so that the twelve curves compare like with like (a built model
runs the stride-1 3x3 convs as Winograd and the 1x1 stride-1 one as a GEMM; those spaces are
different experiments). Each task carries a NumPy reference (float64 einsum over sliding windows),
so a candidate is checked against an oracle that shares nothing with the compiler.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # NumPy and the compiler load when a task is built, not when `--list` reads the table
    import numpy as np

    from autorelay.target import Target
    from search.task import Task


@dataclass(frozen=True)
class ConvWorkload:
    """One of C1-C12: batch 1, square input of `size` pixels, `cin` -> `cout` channels, a square
    `kernel` with symmetric `pad` and `stride`."""

    name: str
    size: int
    cin: int
    cout: int
    kernel: int
    pad: int
    stride: int

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def flops(self) -> float:
        """Multiply-adds counted as two FLOPs: 2 * N * CO * OH * OW * CI * KH * KW (AutoTVM's count)."""
        return 2.0 * self.cout * self.out_size ** 2 * self.cin * self.kernel ** 2

    def describe(self) -> str:
        return (f"{self.size}x{self.size}, {self.cin}->{self.cout}, "
                f"k{self.kernel} p{self.pad} s{self.stride}")


def _w(name: str, size: int, cin: int, cout: int, kernel: int, pad: int, stride: int) -> ConvWorkload:
    return ConvWorkload(name, size, cin, cout, kernel, pad, stride)


# ResNet-18's convolutions at batch 1, C1-C12 as the TVM and AutoTVM papers number them
WORKLOADS: tuple[ConvWorkload, ...] = (
    _w("C1", 224, 3, 64, 7, 3, 2),
    _w("C2", 56, 64, 64, 3, 1, 1),
    _w("C3", 56, 64, 64, 1, 0, 1),
    _w("C4", 56, 64, 128, 3, 1, 2),
    _w("C5", 56, 64, 128, 1, 0, 2),
    _w("C6", 28, 128, 128, 3, 1, 1),
    _w("C7", 28, 128, 256, 3, 1, 2),
    _w("C8", 28, 128, 256, 1, 0, 2),
    _w("C9", 14, 256, 256, 3, 1, 1),
    _w("C10", 14, 256, 512, 3, 1, 2),
    _w("C11", 14, 256, 512, 1, 0, 2),
    _w("C12", 7, 512, 512, 3, 1, 1),
)
BY_NAME = {w.name: w for w in WORKLOADS}


def workloads(names: list[str] | tuple[str, ...]) -> list[ConvWorkload]:
    """The named workloads, in the order given (a KeyError names an unknown one)."""
    return [BY_NAME[n] for n in names]


def conv_reference(data: np.ndarray, weight: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """NCHW/OIHW convolution in float64: every output pixel is the dot product of its input window
    (a strided sliding-window view of the zero-padded data) with each filter."""
    import numpy as np

    x = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = weight.shape[2], weight.shape[3]
    windows = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", windows, weight.astype(np.float64), optimize=True)


def conv_task(w: ConvWorkload, target: Target) -> Task:
    """The tuning task of workload `w` on `target` (its workload key is the compute's structural
    key, so every run of this experiment on the same target files its trials under the same key)."""
    from autorelay.te import nn
    from autorelay.te import tensor as te
    from search.task import kernel_task

    data = te.placeholder((1, w.cin, w.size, w.size), name="data")
    weight = te.placeholder((w.cout, w.cin, w.kernel, w.kernel), name="weight")
    cdef = te.make_def([data, weight], nn.conv2d_nchw(data, weight, w.stride, w.pad), "conv2d")
    ref = functools.partial(conv_reference, stride=w.stride, pad=w.pad)
    return kernel_task(cdef, target, name=f"{w.name} conv {w.describe()}", reference=ref,
                       template="conv2d_nchw")


__all__ = ["BY_NAME", "WORKLOADS", "ConvWorkload", "conv_reference", "conv_task", "workloads"]
