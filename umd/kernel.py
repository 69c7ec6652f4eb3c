"""`@umd.kernel` (also `@umd.jit`, Numba's name): a Python function compiled for the
GPU on first launch; `@umd.jit(device=True)`: a device function, callable from kernels.

    @umd.jit
    def saxpy(n: i32, a: f32, x: f32[:], y: f32[:]): ...

    saxpy[grid, block](n, 2.0, dx, dy)            # the default stream
    saxpy[grid, block, stream](n, 2.0, dx, dy)    # a given stream

    @umd.jit(device=True)
    def clamp(x, lo, hi): ...                     # inlined where a kernel calls it

`grid` counts workgroups, `block` threads per workgroup; each an int or a 1-3 tuple.
Compilation goes through the disk cache (umd.compiler.cache). The only option is
`device` (a bool); any other is a TypeError, never silently ignored. Names the
decorated function's frame had (a kernel defined inside a function, with imports
inside that function) are kept for the compiler: string annotations (PEP 563) and
annotated locals resolve against them.
"""
from __future__ import annotations

import sys

from .compiler import CompiledKernel, compile_kernel
from .compiler.functions import DeviceFunction, JitFunction
from .launch import captured_arrays, launch_kernel, max_cooperative_blocks

# Numba's @cuda.jit options, with what each does here (docs/umd.md, "Numba CUDA -> umd").
OPTIONS = {"device": "compile a device function (called from kernels, inlined) instead of a kernel",
           "fastmath": "contract a * b + c into fused multiply-adds (Numba's fastmath; the vISA's "
                       "division and square root stay exact, denormals are kept)",
           "cache": "accepted: compiled kernels are always cached on disk (VGPU_CACHE_DIR)",
           "lineinfo": "accepted: kernels always carry their source lines (faults, profiles)",
           "debug": "accepted: kernels always carry their source lines; faults name them",
           "opt": "accepted: the optimisations always run",
           "max_registers": "accepted: kernels use what the register allocator gives them",
           "inline": "accepted: device functions are always inlined",
           "link": "Python files implementing the umd.declare_device functions the kernel calls "
                   "(vgpu cannot link CUDA C or PTX: docs/umd.md, 'Linking device functions')"}
_BOOL_OPTIONS = ("device", "fastmath", "cache", "lineinfo", "debug", "opt")


class Kernel(JitFunction):
    def __init__(self, fn, options: dict | None = None, env: dict | None = None) -> None:
        super().__init__(fn, options, env)
        self._compiled: CompiledKernel | None = None

    def compile(self) -> CompiledKernel:
        """The compiled kernel (compiled, or loaded from the cache, once)."""
        if self._compiled is None:
            self._compiled = compile_kernel(self.fn, self.options, self.env)
        return self._compiled

    def __getitem__(self, config) -> "Launcher":
        if not isinstance(config, tuple) or len(config) not in (2, 3, 4):
            raise TypeError(f"{self.fn.__name__}[grid, block], [grid, block, stream] or "
                            "[grid, block, stream, sharedmem] (dynamic shared memory in bytes)")
        return Launcher(self, *config)

    @property
    def overloads(self) -> "Overloads":
        """Numba's ``kernel.overloads[sig]``: umd compiles one overload per kernel (its
        annotations), which every signature key names."""
        return Overloads(self)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self.fn.__name__} is a GPU kernel: launch it as "
                        f"{self.fn.__name__}[grid, block](...)")

    def forall(self, ntasks, tpb=0, stream=0, sharedmem=0):
        """Numba's 1-D launch over ``ntasks`` threads (umd/forall.py): ``k.forall(n)(args)``."""
        from .forall import ForAll
        return ForAll(self, ntasks, tpb, stream, sharedmem)

    def __repr__(self) -> str:
        return f"<umd.kernel {self.fn.__name__}>"


class Launcher:
    def __init__(self, kernel: Kernel, grid, block, stream=None, sharedmem=0) -> None:
        self.kernel, self.grid, self.block, self.stream = kernel, grid, block, stream
        self.sharedmem = sharedmem

    def __call__(self, *args) -> None:
        compiled = self.kernel.compile()
        launch_kernel(compiled, self.grid, self.block, args, self.stream, self.sharedmem,
                      captured_arrays(compiled, self.kernel.fn, self.kernel.env))


class Overload:
    """The compiled kernel as Numba's ``_Kernel`` (``kernel.overloads[sig]``)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    @property
    def cooperative(self) -> bool:
        """Whether the kernel syncs its grid (umd.cg.this_grid().sync())."""
        return self.kernel.compile().cooperative

    def max_cooperative_grid_blocks(self, blockdim, dynsmemsize: int = 0) -> int:
        """Numba's: the most blocks of ``blockdim`` (an int or a 1-3 tuple) threads, with
        ``dynsmemsize`` bytes of dynamic shared memory, a cooperative launch of this
        kernel may have on the current device (docs/umd.md, "Cooperative launches")."""
        return max_cooperative_blocks(self.kernel.compile(), blockdim, dynsmemsize)


class Overloads:
    """``kernel.overloads``: a mapping of the kernel's one compiled overload, under any
    signature key (Numba keys them by argument types; umd has one per kernel)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def __getitem__(self, sig) -> Overload:
        return Overload(self.kernel)

    def __len__(self) -> int:
        return 1

    def __iter__(self):
        return iter([()])

    def values(self):
        return [Overload(self.kernel)]


def _frame_env(depth: int) -> dict:
    """The local names of the frame that applies the decorator, when it is a function's
    (a module's are the function's globals already)."""
    frame = sys._getframe(depth + 1)
    if frame.f_code.co_name == "<module>" or frame.f_locals is frame.f_globals:
        return {}
    return dict(frame.f_locals)


def _make(fn, options: dict, env: dict):
    if not callable(fn):
        raise TypeError(f"@umd.jit decorates a function, not {fn!r}")
    return DeviceFunction(fn, options, env) if options.get("device") else Kernel(fn, options, env)


def kernel(fn=None, **options):
    """Decorator: `@kernel`, `@kernel(device=True)` (also `umd.jit`)."""
    if isinstance(fn, str):
        raise TypeError("umd.jit takes no signature string: annotate the arguments instead "
                        "(e.g. def k(x: f32[:], n: i32)), docs/umd-compiler.md")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"umd.jit: unknown option {unknown[0]!r} (known: "
                        + ", ".join(f"{k}: {v}" for k, v in OPTIONS.items()) + ")")
    for name in _BOOL_OPTIONS:
        if name in options and not isinstance(options[name], bool):
            raise TypeError(f"umd.jit: {name}= takes True or False, not {options[name]!r}")
    if "max_registers" in options and not (isinstance(options["max_registers"], int)
                                           and options["max_registers"] > 0):
        raise TypeError(f"umd.jit: max_registers= takes a positive int, not {options['max_registers']!r}")
    if "link" in options:
        from .compiler.linking import check_links
        options["link"] = list(check_links(options["link"], "umd.jit"))
    if fn is None:
        env = _frame_env(1)
        return lambda f: _make(f, options, env)
    return _make(fn, options, _frame_env(1))


jit = kernel
