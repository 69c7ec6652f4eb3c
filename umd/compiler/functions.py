"""What `@umd.jit` makes, as the compiler sees it: a JitFunction holds the Python
function, the decorator's options and the names of the frame that decorated it.
umd.kernel.Kernel (launched from the host) is one; a DeviceFunction (called from
kernels, inlined) is the other. Here, so that the frontend recognises both without
importing the runtime."""
from __future__ import annotations

import functools


class JitFunction:
    def __init__(self, fn, options: dict | None = None, env: dict | None = None) -> None:
        self.fn = fn
        self.options = dict(options or {})
        self.env = dict(env or {})
        functools.update_wrapper(self, fn)


class DeviceFunction(JitFunction):
    """A function compiled into the kernels that call it (inlined at each call)."""

    def __call__(self, *args, **kwargs):
        """Called from the host, the function runs as the Python it is (as a
        ``@numba.jit`` function shared by host and GPU code does); its exceptions
        propagate."""
        return self.fn(*args, **kwargs)

    def __getitem__(self, config):
        raise TypeError(f"{self.fn.__name__} is a device function: it cannot be launched; call it "
                        "from a @umd.jit kernel")

    def __repr__(self) -> str:
        return f"<umd.jit device function {self.fn.__name__}>"
