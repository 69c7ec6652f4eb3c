"""`for` over arrays, enumerate() and zip() in kernels (compiler/iteration.py), as
Numba's nopython mode iterates them: a 1-D array yields its values, a 2-D one its
rows, enumerate() (index, value) from an optional start, zip() tuples up to the
shortest; each kernel on both executors against a Python loop over numpy arrays, with
ragged sizes; what is not supported is a compile error on the `for` line."""
import numpy as np
import pytest

import umd
from umd import f32, i32
from umd.compiler import build
from umd.compiler.errors import KernelCompileError

from .refrun import run

RNG = np.random.default_rng(31)
ENGINES = ["reference", "cython"]


@umd.kernel
def row_dots(a: f32[:, :], w: f32[:], out: f32[:]):
    i = umd.grid(1)
    if i < a.shape[0]:
        s = 0.0
        for x, y in zip(a[i], w):          # stops at the shorter of the two
            s += x * y
        out[i] = s


@umd.kernel
def count_rows_over(m: f32[:, :], limit: f32, out: i32[:]):
    i = umd.grid(1)
    if i == 0:
        n = 0
        for row in m:                      # a 2-D array yields its rows
            for v in row:
                if v < 0.0:
                    continue
                if v > limit:
                    n += 1
                    break
        out[0] = n


@umd.kernel
def weighted_prefix(x: f32[:], out: f32[:]):
    i = umd.grid(1)
    if i < out.size:
        s = 0.0
        for j, v in enumerate(x, 1):       # enumerate with a start
            if j > i + 1:
                break
            s += v * j
        out[i] = s


@umd.kernel
def argmax_of_sums(a: f32[:], b: f32[:], out: i32[:]):
    if umd.grid(1) == 0:
        best, where = -1.0e30, -1
        for k, (p, q) in enumerate(zip(a, b)):   # nested tuple target
            if p + q > best:
                best, where = p + q, k
        out[0] = where


@umd.jit(device=True)
def total(x: f32[:]) -> f32:
    s = 0.0
    for v in x:
        s += v
    return s


@umd.kernel
def totals(x: f32[:], out: f32[:]):
    if umd.grid(1) == 0:
        s = 0.0
        for c in (1.0, 2.0, 0.5):          # a tuple of numbers iterates too
            s += c * total(x)
        out[0] = s


@pytest.mark.parametrize("engine", ENGINES)
def test_iteration_in_a_device_function_and_over_a_tuple(engine):
    x = RNG.standard_normal(29).astype(np.float32)
    out = np.zeros(1, np.float32)
    run(build(totals), 1, 32, x, out, engine=engine)
    t = np.float32(0)
    for v in x:
        t = np.float32(t + v)
    np.testing.assert_allclose(out[0], 3.5 * t, rtol=1e-6)


@pytest.mark.parametrize("engine", ENGINES)
def test_zip_of_a_row_and_a_shorter_vector(engine):
    a = RNG.standard_normal((37, 13)).astype(np.float32)
    w = RNG.standard_normal(9).astype(np.float32)          # ragged: 9 < 13
    out = np.zeros(37, np.float32)
    run(build(row_dots), 2, 32, a, w, out, engine=engine)
    want = np.array([sum(np.float32(x) * np.float32(y) for x, y in zip(r, w)) for r in a], np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("engine", ENGINES)
def test_rows_of_a_2d_array_with_break_and_continue(engine):
    m = RNG.standard_normal((23, 7)).astype(np.float32)
    out = np.zeros(1, np.int32)
    run(build(count_rows_over), 1, 32, m, np.float32(1.0), out, engine=engine)
    assert out[0] == sum(1 for row in m if any(v > 1.0 for v in row if v >= 0.0))


@pytest.mark.parametrize("engine", ENGINES)
def test_enumerate_with_a_start(engine):
    x = RNG.standard_normal(45).astype(np.float32)
    out = np.zeros(45, np.float32)
    run(build(weighted_prefix), 2, 32, x, out, engine=engine)
    want = []
    for i in range(45):
        s = np.float32(0)
        for j, v in enumerate(x, 1):
            if j > i + 1:
                break
            s = np.float32(s + v * np.float32(j))
        want.append(s)
    np.testing.assert_allclose(out, np.array(want, np.float32), rtol=1e-6)


@pytest.mark.parametrize("engine", ENGINES)
def test_enumerate_of_zip(engine):
    a = RNG.standard_normal(50).astype(np.float32)
    b = RNG.standard_normal(41).astype(np.float32)
    out = np.zeros(1, np.int32)
    run(build(argmax_of_sums), 1, 32, a, b, out, engine=engine)
    assert out[0] == int(np.argmax(a[:41] + b))


def test_element_reads_need_no_negative_index_test():
    """The hidden counter counts up from 0, so x[k] gets no wraparound select."""
    asm = build(weighted_prefix).asm_text
    assert "v_cndmask" not in asm and "s_cselect" not in asm


def _compile_error(fn) -> str:
    with pytest.raises(KernelCompileError) as e:
        build(umd.kernel(fn))
    return str(e.value)


def test_range_inside_enumerate_is_a_clear_error():
    def k(x: f32[:]):
        for j, v in enumerate(range(4)):
            x[j] = v
    msg = _compile_error(k)
    assert "range() inside enumerate() or zip() is not supported" in msg
    assert "for j, v in enumerate(range(4)):" in msg


def test_for_else_over_an_array_is_refused():
    def k(x: f32[:]):
        for v in x:
            x[0] = v
        else:
            x[1] = 0.0
    assert "for ... else" in _compile_error(k)


def test_iterating_a_number_is_an_error():
    def k(x: f32[:], n: i32):
        for v in n:
            x[0] = v
    msg = _compile_error(k)
    assert "len() of an array or a tuple" in msg and "for v in n:" in msg
