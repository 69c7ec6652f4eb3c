"""Fixtures for the hardware tests: every test runs on both implementations."""
import numpy as np
import pytest

from kmd.hw import _core, ref
from kmd.hw.ih import InterruptRing
from kmd.hw.mmu import PTE_READ, PTE_WRITE

IMPLS = {"core": _core, "ref": ref}
RW = PTE_READ | PTE_WRITE


@pytest.fixture(params=sorted(IMPLS))
def hw(request):
    """The implementation module under test (kmd.hw._core or kmd.hw.ref)."""
    return IMPLS[request.param]


@pytest.fixture
def ih():
    return InterruptRing()


def arena(nbytes: int, seed: int = 0) -> np.ndarray:
    """A uint8 buffer filled with seeded random bytes."""
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
