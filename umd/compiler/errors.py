"""The compiler's exception."""
from __future__ import annotations

try:        # umd.KernelCompileError is this class's base: `except umd.KernelCompileError`
    from umd.errors import KernelCompileError as _Base
except ImportError:
    _Base = Exception


class KernelCompileError(_Base):
    """A kernel the compiler cannot translate: str() is `file:line: kernel: message`."""

    def __init__(self, msg: str, line: int | None = None) -> None:
        super().__init__(msg)
        self.line = line
