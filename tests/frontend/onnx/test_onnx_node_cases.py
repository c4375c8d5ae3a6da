"""The ONNX backend node test cases (shipped in the onnx wheel) for every case whose ops the importer
converts: import + infer_types + the reference interpreter against the expected outputs.

Variants the importer does not support are listed below with the reason. For those the test still
checks that import fails with a clear `OnnxImportError` (never a wrong answer), then skips.
"""

import re

import pytest

onnx = pytest.importorskip("onnx")

from autorelay.frontend.onnx import OnnxImportError  # noqa: E402
from autorelay.frontend.onnx.node_cases import run_case, supported_cases  # noqa: E402

KNOWN_UNSUPPORTED = [
    (
        r"BFLOAT16|FLOAT8|E4M3|E5M2|FLOAT4|_INT4|_UINT4|_INT2|_UINT2|int4|int2|e8m0|e4m3|e5m2|float4|_string",
        "element type the IR cannot hold (bfloat16, float8, 4/2-bit ints, strings)",
    ),
    (
        r"training_dropout(_default|_mask|_default_mask)?$",
        "training-mode Dropout with a non-zero ratio (random)",
    ),
    (r"blocked", "blocked quantisation (block_size)"),
    (r"quantizelinear_uint16", "uint16 quantisation: qnn ops take int8/uint8/int16/int32"),
    (r"identity_opt|if_opt|loop16_seq|test_optional_get_element_optional_|test_optional_has_element_"
     r"(empty_optional|optional|tensor)_input$", "an optional graph input or branch value (present or not "
                                                 "only at run time)"),
    (r"loop13_seq|sequence_map_.*_expanded", "a sequence a Loop grows (its length known only at run time)"),
    (r"test_not_[234]d$", "opset 1 (older than 7)"),
    (r"test_scan_sum$", "opset 8 Scan (a batch axis and sequence_lens)"),
    (r"affine_grid_2d.*_expanded", "Squeeze without axes of a dynamic-shape input (rank depends on data)"),
    (r"affine_grid_3d_align_corners_expanded", "an If branch reads a value not found in its scope"),
    (r"attention.*padded_kv$", "Attention's nonpad_kv_seqlen (opset 24)"),
]

# Imported, but the reference computes differently from ONNX: expected to fail, strictly.
KNOWN_DIFFERENT: dict[str, str] = {
    "test_maxunpool_export_with_output_shape": (
        "indices read as positions in the output_shape tensor, as ONNX Runtime reads them; the "
        "case reads them in the smaller inferred shape, then pads"),
}

CASES = supported_cases()


def _known(name: str) -> str | None:
    for pattern, reason in KNOWN_UNSUPPORTED:
        if re.search(pattern, name, re.IGNORECASE):
            return reason
    return None


def test_enough_cases_found():
    assert len(CASES) > 500


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    reason = _known(case.name)
    if reason is not None:
        with pytest.raises(OnnxImportError):
            run_case(case)
        pytest.skip(f"known unsupported: {reason}")
    if case.name in KNOWN_DIFFERENT:
        ok, _ = run_case(case)
        assert not ok, "now matches: drop it from KNOWN_DIFFERENT"
        pytest.xfail(KNOWN_DIFFERENT[case.name])
    ok, msg = run_case(case)
    assert ok, msg
