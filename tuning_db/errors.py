"""Errors of the tuning log.

Every failure a user can cause (a bad URL, an unreachable server, a corrupt import line, a database
written by a newer version) surfaces as a `TuningDBError` whose message is one short line, so the
command line can print it as is instead of a traceback.
"""

from __future__ import annotations


class TuningDBError(Exception):
    """A tuning-log failure with a one-line, user-facing message."""

    def __init__(self, message: str) -> None:
        # Collapse to one line: driver messages often carry multi-line detail we don't want to show.
        first = " ".join(str(message).split("\n")[0].split())
        super().__init__(first)


class SchemaVersionError(TuningDBError):
    """The database was written by a newer (or unknown) schema version than this code understands."""


class JSONLImportError(TuningDBError):
    """A strict import found bad lines and imported nothing; `report` lists every bad line."""

    def __init__(self, message: str, report: object) -> None:
        super().__init__(message)
        self.report = report


def one_line(exc: BaseException) -> str:
    """The first non-empty line of a (driver) exception's message, for wrapping in a TuningDBError."""
    orig = getattr(exc, "orig", None) or exc
    for line in str(orig).splitlines():
        if line.strip():
            return line.strip()
    return type(orig).__name__
