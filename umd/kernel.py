"""`@umd.kernel`: a Python function compiled for the GPU on first launch.

    @umd.kernel
    def saxpy(n: i32, a: f32, x: Ptr[f32], y: Ptr[f32]): ...

    saxpy[grid, block](n, 2.0, dx, dy)            # the default stream
    saxpy[grid, block, stream](n, 2.0, dx, dy)    # a given stream

`grid` counts workgroups, `block` threads per workgroup; each an int or a 1-3 tuple.
Compilation goes through the disk cache (umd.compiler.cache); options given as
`@umd.kernel(opt=...)` are part of the cache key.
"""
from __future__ import annotations

import functools

from .compiler import CompiledKernel, compile_kernel
from .launch import launch_kernel


class Kernel:
    def __init__(self, fn, options: dict | None = None) -> None:
        self.fn = fn
        self.options = dict(options or {})
        self._compiled: CompiledKernel | None = None
        functools.update_wrapper(self, fn)

    def compile(self) -> CompiledKernel:
        """The compiled kernel (compiled, or loaded from the cache, once)."""
        if self._compiled is None:
            self._compiled = compile_kernel(self.fn, self.options)
        return self._compiled

    def __getitem__(self, config) -> "Launcher":
        if not isinstance(config, tuple) or len(config) not in (2, 3):
            raise TypeError(f"{self.fn.__name__}[grid, block] or [grid, block, stream]")
        return Launcher(self, *config)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self.fn.__name__} is a GPU kernel: launch it as "
                        f"{self.fn.__name__}[grid, block](...)")

    def __repr__(self) -> str:
        return f"<umd.kernel {self.fn.__name__}>"


class Launcher:
    def __init__(self, kernel: Kernel, grid, block, stream=None) -> None:
        self.kernel, self.grid, self.block, self.stream = kernel, grid, block, stream

    def __call__(self, *args) -> None:
        launch_kernel(self.kernel.compile(), self.grid, self.block, args, self.stream)


def kernel(fn=None, **options):
    """Decorator: `@kernel` or `@kernel(**options)`."""
    if fn is None:
        return lambda f: Kernel(f, options)
    return Kernel(fn, options)
