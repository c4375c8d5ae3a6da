"""The README's ONNX operator list is the converter table's (regenerate it, never edit it by hand)."""

from pathlib import Path

from autorelay.frontend.onnx import coverage
from autorelay.frontend.onnx.converters import SUPPORTED_OPS


def test_readme_lists_exactly_the_converted_operators():
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    section = coverage.section_of(readme)
    assert section is not None, "README.md lost its generated ONNX operator section"
    regenerate = "python -m autorelay.frontend.onnx.coverage --write README.md"
    assert section == coverage.markdown(), f"README.md's ONNX operator list is stale: run {regenerate}"
    assert all(f"`{op}`" in section for op in SUPPORTED_OPS)
