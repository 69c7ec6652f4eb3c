"""`umd.jit_module(**options)`: Numba's `cuda.jit_module` (numba/cuda/decorators.py).

    # at the bottom of a module
    def inc(x):
        return x + 1
    umd.jit_module()          # inc is now a device function: kernels call it, Python too

Called at the end of a module, it replaces every plain function defined in that
module (not imported into it, and not already a @umd.jit object) by
`umd.jit(fn, **options)`. As in Numba, `device` defaults to True: the functions become
device functions, which kernels inline and which the host calls as Python; give
`device=False` to make them kernels instead.
"""
from __future__ import annotations

import inspect
import sys


def jit_module(**options) -> None:
    """jit-wrap every function the calling module defines (device functions unless
    ``device=False``)."""
    from .kernel import _make, kernel
    options.setdefault("device", True)
    kernel(**options)                        # checks the options as @umd.jit does
    caller = sys._getframe(1)
    module = inspect.getmodule(caller)
    namespace = module.__dict__ if module is not None else caller.f_globals
    name = namespace.get("__name__")
    for attr, obj in list(namespace.items()):
        if inspect.isfunction(obj) and obj.__module__ == name:
            namespace[attr] = _make(obj, dict(options), {})
