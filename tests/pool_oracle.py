"""Pooling by loops over its windows, from the op's definition: the oracle of the pooling ops'
references (tests/op) and of the blocked pooling kernels (tests/kernels). Import it as
``from pool_oracle import naive_pool`` (pytest puts tests/ on the path, see conftest)."""

from __future__ import annotations

import math

import numpy as np


def naive_pool(x, kind, k, s=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), ceil=False, include_pad=False):
    n, c, h, w = x.shape
    sizes = []
    for ax, size in enumerate((h, w)):
        span = dil[ax] * (k[ax] - 1) + 1
        num = size + pad[ax] + pad[2 + ax] - span
        out = (math.ceil(num / s[ax]) if ceil else num // s[ax]) + 1
        if ceil and (out - 1) * s[ax] >= size + pad[ax]:
            out -= 1
        sizes.append(out)
    res = np.zeros((n, c, *sizes))
    for i in range(sizes[0]):
        for j in range(sizes[1]):
            vals, padded_count = [], 0
            for p in range(k[0]):
                for q in range(k[1]):
                    r, t = i * s[0] - pad[0] + p * dil[0], j * s[1] - pad[1] + q * dil[1]
                    if -pad[0] <= r < h + pad[2] and -pad[1] <= t < w + pad[3]:
                        padded_count += 1
                    if 0 <= r < h and 0 <= t < w:
                        vals.append(x[:, :, r, t])
            if kind == "max":
                res[:, :, i, j] = np.max(vals, axis=0)
            else:
                res[:, :, i, j] = np.sum(vals, axis=0) / (padded_count if include_pad else len(vals))
    return res
