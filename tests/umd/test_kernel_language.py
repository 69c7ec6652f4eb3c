"""The kernels of tests/umd/lang_kernels.py on both executors (the reference
kmd.hw.cu_ref and the Cython core), no mount, against numpy."""
import numpy as np
import pytest

from umd.compiler import build

from . import lang_kernels as K
from .refrun import run

RNG = np.random.default_rng(1414)
ENGINES = ["reference", "cython"]


def blocks(n, b):
    return (n + b - 1) // b


@pytest.mark.parametrize("engine", ENGINES)
def test_negative_constant_indices(engine):
    a = RNG.standard_normal(45).astype(np.float32)
    m = RNG.standard_normal((19, 7)).astype(np.float32)
    ends, col = np.zeros(3, np.float32), np.zeros(19, np.float32)
    run(build(K.last_items), 1, 32, a, m, ends, col, engine=engine)
    np.testing.assert_array_equal(ends, [a[-1], a[-2], m[-1, -1]])
    np.testing.assert_array_equal(col, m[:, -1])


@pytest.mark.parametrize("engine", ENGINES)
def test_negative_runtime_indices(engine):
    a = RNG.standard_normal(77).astype(np.float32)
    out = np.zeros_like(a)
    run(build(K.reverse), blocks(77, 32), 32, a, out, engine=engine)
    np.testing.assert_array_equal(out, a[::-1])
    m = RNG.integers(-100, 100, (13, 11)).astype(np.int32)
    got = np.zeros_like(m)
    run(build(K.rotate_rows), (blocks(13, 8), blocks(11, 8)), (8, 8), m, got, engine=engine)
    want = np.array([[m[i - 1, j - 3] for j in range(11)] for i in range(13)], np.int32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("engine", ENGINES)
def test_negative_indices_of_shared_and_local_arrays(engine):
    a = RNG.standard_normal(32).astype(np.float32)
    out = np.zeros_like(a)
    run(build(K.negative_shared_and_local), 1, 32, a, out, engine=engine)
    np.testing.assert_array_equal(out, np.roll(a, 1) + a * 2 + a[0])


def test_nonnegative_indices_are_not_tested():
    """grid(1), thread ids and upward loop counters need no wraparound test."""
    asm = build(K.reverse).asm_text
    assert asm.count("v_cndmask") + asm.count("s_cselect") == 1       # only a[-1 - i]


@pytest.mark.parametrize("engine", ENGINES)
def test_print_from_every_thread(engine):
    """2 blocks of 32 threads, each prints once: every line once, in Numba's format
    (an integer as %lld, a float32 as %f of its double); the order is unspecified."""
    x = (RNG.standard_normal(64) * 100).astype(np.float32)
    printed = {}
    run(build(K.print_values), 2, 32, x, engine=engine, printed=printed)
    want = ["thread %d %f" % (i, float(x[i])) for i in range(64)]
    assert sorted(printed["lines"]) == sorted(want) and printed["dropped"] == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_print_formats_each_type(engine):
    printed = {}
    run(build(K.print_types), 1, 32, -(1 << 40), (1 << 32) - 1, 0.1, (1 << 64) - 1,
        engine=engine, printed=printed)
    assert printed["lines"] == [f"i64 {-(1 << 40)} u32 {(1 << 32) - 1} f64 0.100000 u64 "
                                f"{(1 << 64) - 1} bool True", "", "-7 2.500000"]


def test_print_buffer_full_drops_the_rest():
    x = np.arange(64, dtype=np.float32)
    printed = {}
    record = 4 + 2 * 8                      # the format word, i and x[i]
    run(build(K.print_values), 2, 32, x, print_bytes=10 * record, printed=printed)
    assert len(printed["lines"]) == 10 and printed["dropped"] == 54
    assert len(set(printed["lines"])) == 10
