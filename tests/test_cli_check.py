"""`autorelay check` on inputs that are not programs: one line on stderr, bounded reads and echoes."""

from __future__ import annotations

from pathlib import Path

import pytest

from autorelay.errors import MAX_ECHO, ParseError
from search.cli import main
from search.textfile import read_program_text


def test_a_binary_file_is_one_line_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "blob.rly"
    path.write_bytes(b"def @main() { \xff\xfe\x00\x01 }")  # not UTF-8
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "blob.rly" in err[0]


def test_a_huge_line_is_not_echoed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = "a" * 2_000_000
    path = tmp_path / "long.rly"
    path.write_text(f'#[version = "0.0.5"]\ndef @main() {{ {line} }}\n')
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "long.rly:2:" in err
    assert len(err) < 6 * MAX_ECHO  # message, line window and caret; not the 2 MB line (twice)


def test_a_device_that_never_ends_is_read_only_up_to_the_limit() -> None:
    with pytest.raises(ValueError, match="larger than 4096 bytes"):
        read_program_text("/dev/zero", limit=4096)


def test_the_caret_still_points_at_the_column_in_a_clipped_line() -> None:
    source_line = "x" * 1000 + "@" + "y" * 1000
    err = ParseError("bad token", 1, 1001, source_line)
    _, shown, caret = str(err).splitlines()
    assert shown.strip()[caret.index("^") - 2] == "@"
