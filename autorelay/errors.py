"""The exceptions users see. Each names what went wrong and where."""

from __future__ import annotations


class AutoRelayError(Exception):
    """Base of every error AutoRelay raises on purpose."""


class ParseError(AutoRelayError):
    """Malformed program text. Carries 1-based `line` and `column` and shows the line with a caret."""

    def __init__(self, message: str, line: int, column: int, source_line: str = "", source: str = "<string>"):
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        self.source = source
        text = f"{source}:{line}:{column}: {clip(message, MAX_ECHO)}"
        if source_line:
            shown, caret = _window(source_line, column)
            text += f"\n  {shown}\n  {' ' * caret}^"
        super().__init__(text)


MAX_ECHO = 160  # characters of user input an error message may repeat (a 50 MB line is not echoed)


def clip(text: str, limit: int = MAX_ECHO) -> str:
    """`text` cut to `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _window(source_line: str, column: int, width: int = MAX_ECHO) -> tuple[str, int]:
    """At most `width` characters of the line around `column`, and the caret's offset in them."""
    if len(source_line) <= width:
        return source_line, column - 1
    start = max(0, min(column - 1 - width // 2, len(source_line) - width))
    shown = source_line[start : start + width]
    lead, tail = ("…" if start else ""), ("…" if start + width < len(source_line) else "")
    return lead + shown + tail, column - 1 - start + len(lead)


class TypeCheckError(AutoRelayError):
    """An ill-typed program: names the op or construct, the argument and the conflicting types."""

    def __init__(self, message: str, span: object | None = None):
        self.message = message
        self.span = span
        super().__init__(f"{span}: {message}" if span is not None else message)

    def with_span(self, span: object | None) -> TypeCheckError:
        """The same error located at `span` (kept if it already has one)."""
        if self.span is not None or span is None:
            return self
        err = type(self)(self.message, span)
        err.__cause__ = self.__cause__
        return err


class InterpreterError(AutoRelayError):
    """A failure while running a program (an incomplete match, a shape mismatch on an input …)."""


# Relay users know this name; it is the same class.
RuntimeError = InterpreterError


class ScheduleError(AutoRelayError):
    """A schedule step that is illegal for the kernel it is applied to."""


class BuildError(AutoRelayError):
    """The model cannot be built by this backend (control flow, dynamic shapes, …)."""
