"""The compiler's exception."""
from __future__ import annotations

from umd import errors


class KernelCompileError(errors.KernelCompileError):     # so `except umd.KernelCompileError` catches it
    """A kernel the compiler cannot translate: str() is `file:line: kernel: message`."""

    def __init__(self, msg: str, line: int | None = None) -> None:
        super().__init__(msg)
        self.line = line
