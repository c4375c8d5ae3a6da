"""The `#[metadata]` section of the text format: the arrays behind `meta[relay.Constant][i]`.

Relay's own metadata is a serialized TVM object graph; ours is a small self-describing JSON
document, so a printed module carries its constants and reads back without side files:

    #[metadata]
    {"format": "autorelay-metadata", "version": 1,
     "relay.Constant": [{"dtype": "float32", "shape": [2, 3], "data": "<base64, little-endian>"}]}
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence

import numpy as np

from autorelay.errors import ParseError

FORMAT = "autorelay-metadata"


def encode_metadata(arrays: Sequence[np.ndarray]) -> str:
    entries = []
    for a in arrays:
        a = np.asarray(a)
        le = a.astype(a.dtype.newbyteorder("<"), copy=False)
        entries.append({
            "dtype": str(a.dtype),
            "shape": [int(d) for d in a.shape],
            "data": base64.b64encode(np.ascontiguousarray(le).tobytes()).decode("ascii"),
        })
    doc = {"format": FORMAT, "version": 1, "relay.Constant": entries}
    # One constant per line keeps a diff of two printed modules readable.
    body = ",\n    ".join(json.dumps(e) for e in entries)
    head = json.dumps({k: v for k, v in doc.items() if k != "relay.Constant"})[:-1]
    return f'{head}, "relay.Constant": [\n    {body}\n  ]}}\n'


def decode_metadata(text: str, source: str = "<string>", line: int = 1) -> list[np.ndarray]:
    """The constant arrays of a metadata section; malformed input is a located ParseError."""

    def bad(msg: str) -> ParseError:
        return ParseError(f"bad #[metadata] section: {msg}", line, 1, "#[metadata]", source)

    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        lines = text.split("\n")
        src = lines[e.lineno - 1] if 0 < e.lineno <= len(lines) else ""
        msg = f"bad #[metadata] section: {e.msg}"
        raise ParseError(msg, line + e.lineno - 1, e.colno, src, source) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise bad(f"expected a JSON object with \"format\": \"{FORMAT}\"")
    out: list[np.ndarray] = []
    for i, entry in enumerate(doc.get("relay.Constant", [])):
        try:
            dtype = np.dtype(entry["dtype"])
            shape = tuple(int(d) for d in entry["shape"])
            raw = base64.b64decode(entry["data"], validate=True)
        except (KeyError, TypeError, ValueError, binascii.Error) as e:
            raise bad(f"constant {i}: {e}") from None
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if len(raw) != expected:
            raise bad(f"constant {i}: {len(raw)} bytes for shape {shape} {dtype} ({expected} expected)")
        arr = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
        out.append(arr)
    return out
