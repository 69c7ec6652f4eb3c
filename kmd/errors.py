"""The one error type the KMD raises: an errno plus the reason logged to kmsg."""
import errno as _errno


class KmdError(Exception):
    """A refused or failed request. `errno` is what the failing syscall returns."""

    def __init__(self, errno: int, reason: str = ""):
        super().__init__(errno, reason or _errno.errorcode.get(errno, str(errno)))
        self.errno = errno
        self.reason = reason

    def __str__(self) -> str:
        return f"{_errno.errorcode.get(self.errno, self.errno)}: {self.reason}"


def check(cond: bool, err: int, reason: str) -> None:
    """Refuse with `err` unless `cond` holds (the `if (args->pad) return -EINVAL;` idiom)."""
    if not cond:
        raise KmdError(err, reason)
