"""Random numbers in kernels: Numba's ``numba.cuda.random``, as ``umd.random``.

    from umd.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float32

    @umd.jit
    def pi_darts(states: u64[:, :], hits: i32[:]):
        i = umd.grid(1)
        x = xoroshiro128p_uniform_float32(states, i)
        y = xoroshiro128p_uniform_float32(states, i)
        if x * x + y * y < 1.0:
            umd.atomic.add(hits, 0, 1)

    states = create_xoroshiro128p_states(blocks * threads, seed=1)

The generator is xoroshiro128+ (Blackman and Vigna), one 128-bit state per thread, as
Numba's: ``states`` is an ``(n, 2)`` uint64 DeviceArray (annotate it ``u64[:, :]``,
also spelt ``umd.random.xoroshiro128p_type``), row ``i`` the state thread ``i`` draws
from. The draws are device functions, inlined where a kernel calls them. What differs
from Numba (docs/umd.md, "Random numbers"): Numba spaces the states 2^64 draws apart
along one sequence (a jump per state, done by a compiled loop on the host); here state
``i`` is filled by SplitMix64 from the seed and ``subsequence_start + i``, the seeding
the generator's authors recommend, computed with numpy. The streams are therefore not
Numba's numbers, but the same generator, seeded the same way for every seed.
"""
from __future__ import annotations

import math

import numpy as np

from .array import DeviceArray, to_device
from .kernel import jit
from .types import f32, f64, u64

#: the annotation of a states array in a kernel
xoroshiro128p_type = u64[:, :]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
TWO_PI = 2.0 * math.pi


def _splitmix64(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def init_xoroshiro128p_states_host(n: int, seed: int, subsequence_start: int = 0) -> np.ndarray:
    """The ``(n, 2)`` uint64 states on the host: row i from SplitMix64 of the seed and
    ``subsequence_start + i`` (never the all-zero state, which xoroshiro cannot leave)."""
    if n < 0:
        raise ValueError(f"create_xoroshiro128p_states: n must be >= 0, not {n}")
    k = np.arange(subsequence_start, subsequence_start + n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        base = np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + k * np.uint64(2) * _GOLDEN
        states = np.stack([_splitmix64(base), _splitmix64(base + _GOLDEN)], axis=1)
    states[(states[:, 0] == 0) & (states[:, 1] == 0), 0] = 1
    return states


def create_xoroshiro128p_states(n: int, seed: int, subsequence_start: int = 0, stream=None) -> DeviceArray:
    """A device array of ``n`` generator states for ``seed`` (Numba's signature)."""
    return to_device(init_xoroshiro128p_states_host(n, seed, subsequence_start), stream=stream)


@jit(device=True)
def xoroshiro128p_next(states, index):
    """The next uint64 of ``states[index]``, which it advances (xoroshiro128+)."""
    s0 = states[index, 0]
    s1 = states[index, 1]
    result = s0 + s1
    s1 = s1 ^ s0
    states[index, 0] = ((s0 << 55) | (s0 >> 9)) ^ s1 ^ (s1 << 14)
    states[index, 1] = (s1 << 36) | (s1 >> 28)
    return result


@jit(device=True)
def xoroshiro128p_uniform_float64(states, index):
    """A float64 in [0, 1): the top 53 bits of the next draw."""
    return f64(xoroshiro128p_next(states, index) >> 11) * (1.0 / 9007199254740992.0)


@jit(device=True)
def xoroshiro128p_uniform_float32(states, index):
    """A float32 in [0, 1): the top 24 bits of the next draw (so never 1.0)."""
    return f32(u64(xoroshiro128p_next(states, index) >> 40)) * f32(1.0 / 16777216.0)


@jit(device=True)
def xoroshiro128p_normal_float64(states, index):
    """A standard normal float64 (Box-Muller on two draws; 1 - u keeps log finite)."""
    u1 = xoroshiro128p_uniform_float64(states, index)
    u2 = xoroshiro128p_uniform_float64(states, index)
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(TWO_PI * u2)


@jit(device=True)
def xoroshiro128p_normal_float32(states, index):
    """A standard normal float32 (Box-Muller in float32)."""
    u1 = xoroshiro128p_uniform_float32(states, index)
    u2 = xoroshiro128p_uniform_float32(states, index)
    return math.sqrt(f32(-2.0) * math.log(f32(1.0) - u1)) * math.cos(f32(TWO_PI) * u2)


__all__ = ["create_xoroshiro128p_states", "init_xoroshiro128p_states_host", "xoroshiro128p_next",
           "xoroshiro128p_normal_float32", "xoroshiro128p_normal_float64", "xoroshiro128p_type",
           "xoroshiro128p_uniform_float32", "xoroshiro128p_uniform_float64"]
