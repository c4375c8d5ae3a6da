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
        text = f"{source}:{line}:{column}: {message}"
        if source_line:
            text += f"\n  {source_line}\n  {' ' * (column - 1)}^"
        super().__init__(text)


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
