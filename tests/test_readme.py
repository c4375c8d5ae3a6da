"""The README's first Python example runs as written (documentation that drifts is a bug)."""

import pathlib
import re


def test_readme_parse_example_runs(capsys):
    text = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    first = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    exec(compile(first, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "-> Tensor[(1, 4, 8, 8), float32]" in out and "/* ty=" in out
