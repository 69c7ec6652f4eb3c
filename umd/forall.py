"""`kernel.forall(ntasks, tpb=0, stream=0, sharedmem=0)`: Numba's 1-D launch that
covers `ntasks` threads (numba/cuda/dispatcher.py, `ForAll`).

    @umd.jit
    def add(x: f32[:], y: f32[:], out: f32[:]):
        i = umd.grid(1)
        if i < out.size:
            out[i] = x[i] + y[i]

    add.forall(n)(dx, dy, dout)               # grid x block >= n, block chosen for the device

As in Numba, the kernel maps `umd.grid(1)` to one task each and checks it against
`ntasks`; `ntasks == 0` launches nothing. The block size, when `tpb` is 0, is what
CUDA's occupancy API (cuOccupancyMaxPotentialBlockSize) would answer on this device:
the largest block that keeps every compute unit busy. A vgpu CU has no register-file
or per-CU LDS limit below one 1024-thread workgroup (docs/hw.md: a workgroup runs on
one worker), so any block size fills a CU; the largest one, a multiple of the wave,
that still gives each CU of the device a workgroup is taken (fewer workgroups cost
less to hand out), and a kernel that requires a block size gets that one.
"""
from __future__ import annotations

import numbers

from vgpu import isa

from .errors import LaunchError


def _count(what: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"forall: {what} must be an int, not {type(value).__name__} {value!r}")
    if value < lo:
        raise ValueError(f"forall: {what} must be >= {lo}, got {value}")
    return int(value)


def block_size_for(compiled, ntasks: int, device) -> int:
    """The block size `forall` picks for `compiled` over `ntasks` on `device`."""
    from .launch import load_kernel
    required = tuple(load_kernel(device, compiled).obj.block)
    if any(required):
        if required[1:] not in ((0, 0), (1, 1)):
            raise LaunchError(f"{compiled.name} requires block {required}: forall launches "
                              "1-D blocks only")
        return required[0]
    cus = max(1, device.MULTIPROCESSOR_COUNT)
    per_cu = -(-ntasks // cus)
    wave = isa.WAVE_SIZE
    return max(wave, min(isa.MAX_BLOCK_THREADS, -(-per_cu // wave) * wave))


class ForAll:
    """A kernel configured for `ntasks` tasks: call it with the kernel's arguments."""

    def __init__(self, kernel, ntasks, tpb=0, stream=0, sharedmem=0) -> None:
        self.kernel = kernel
        self.ntasks = _count("ntasks", ntasks, 0)
        self.tpb = _count("tpb", tpb, 0)
        if self.tpb > isa.MAX_BLOCK_THREADS:
            raise ValueError(f"forall: tpb={tpb} is past {isa.MAX_BLOCK_THREADS} threads per block")
        self.stream = stream
        self.sharedmem = _count("sharedmem", sharedmem, 0)

    def __call__(self, *args) -> None:
        if self.ntasks == 0:
            return
        from .stream import current_stream
        stream = current_stream(self.stream or None)
        tpb = self.tpb or block_size_for(self.kernel.compile(), self.ntasks, stream.device)
        grid = -(-self.ntasks // tpb)
        if self.sharedmem:          # the 4-part launch: dynamic shared memory
            self.kernel[grid, tpb, stream, self.sharedmem](*args)
        else:
            self.kernel[grid, tpb, stream](*args)

    def __repr__(self) -> str:
        return f"<umd forall {self.kernel!r} over {self.ntasks} tasks>"
