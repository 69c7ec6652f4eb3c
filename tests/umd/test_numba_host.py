"""Numba's host-side helpers without a mount: the kernels umd.reduce, umd.vectorize and
umd.guvectorize generate, on both executors (the reference one and the Cython core)
against numpy; forall's argument checks; device functions and umd.jit_module functions
called from Python; signature parsing and selection; the numba.cuda name list.
tests/umd/test_numba_host_e2e.py runs the same features through a mount."""
import numpy as np
import pytest

import umd
from umd import f32, f64
from umd.compiler import build
from umd.compiler.functions import DeviceFunction
from umd.forall import ForAll
from umd.guvectorize import gufunc_kernel, parse_layout
from umd.kernel_source import device_function, inline_expression
from umd.numba_names import MISSING, PROVIDED
from umd.reduce import BLOCK, CHUNK, MAX_BLOCKS, plan, reduce_kernel, source_views
from umd.vectorize import BLOCK as VBLOCK, CHUNK as VCHUNK, UNROLL as VUNROLL, launch_blocks, parse_signature, ufunc_args, ufunc_kernel

from . import numba_host_kernels as K
from .refrun import run

RNG = np.random.default_rng(25)
EXECUTORS = ["reference", "cython"]


def run_views(compiled, grid, block, *args, engine, mem_size=64 << 20):
    """refrun.run for kernels given views of one array (reduce's and vectorize's
    unrolled copies, umd/reduce.py): each base array is placed once and a view's pointer
    is its base's plus its offset, so writes through a view land in the base as on the
    device; numpy arrays only, copied back into the bases."""
    import struct
    from kmd.hw import _core, cu_ref, ref
    from tests.hw.isa_gen import CODE_VA, KARG_VA, MEM_VA, Rig
    from vgpu.asm import CodeObject
    rig = Rig(_core.ComputeEngine, _core.PageTable, mem_size=mem_size) if engine == "cython" else \
        Rig(cu_ref.ComputeEngine, ref.PageTable, mem_size=mem_size)
    obj = CodeObject.unpack(compiled.code_object)
    rig.code[:len(obj.code)] = np.frombuffer(obj.code, np.uint8)
    user = [a for a in compiled.args if not a.name.startswith("__")]
    values = dict(zip([a.name for a in user], args))
    grid3, block3 = (grid, 1, 1), (block, 1, 1)
    placed, off = {}, 0
    for a in args:
        if isinstance(a, np.ndarray):
            base = a if a.base is None else a.base
            if id(base) not in placed:
                rig.put(off, base)
                placed[id(base)] = (base, off)
                off = (off + base.nbytes + 255) // 256 * 256
    for spec in compiled.args:
        if spec.name.startswith("__grid_dim_") or spec.name.startswith("__block_dim_"):
            dims = grid3 if "grid" in spec.name else block3
            v = dims["xyz".index(spec.name[-1])]
        elif spec.name.startswith("__shape_"):
            v = values[spec.name[len("__shape_"):].rsplit("_", 1)[0]].size
        else:
            v = values[spec.name]
        if spec.kind == "ptr":
            base = v if v.base is None else v.base
            at = placed[id(base)][1] + (v.__array_interface__["data"][0] - base.__array_interface__["data"][0])
            raw = struct.pack("<Q", MEM_VA + at)
        else:
            raw = struct.pack({"f32": "<f", "f64": "<d", "i64": "<q", "u64": "<Q"}.get(spec.kind, "<i"), v)
        rig.karg[spec.offset:spec.offset + spec.size] = np.frombuffer(raw, np.uint8)
    result = rig.engine.dispatch(rig.pt, CODE_VA + obj.entry, sgprs=obj.sgprs, vgprs=obj.vgprs,
                                 lds_bytes=obj.lds_bytes, grid=grid3, block=block3,
                                 user_data=[KARG_VA & 0xFFFFFFFF, KARG_VA >> 32])
    assert result.status == "ok", result
    for base, at in placed.values():
        base[...] = rig.mem[at:at + base.nbytes].view(base.dtype).reshape(base.shape)
    return result


def _reduce_on(engine, fn, x, init):
    """What Reduce.__call__ launches, on an executor: pass 1 over x, pass 2 over the partials."""
    kernel = reduce_kernel(device_function(fn, "test"), x.dtype)
    compiled = build(kernel)
    n = x.size
    blocks, _ = plan(n)
    out = np.zeros(1, x.dtype)
    if blocks == 1:
        run_views(compiled, 1, BLOCK, *source_views(kernel, x), out, init, 1, engine=engine)
    else:
        partials = np.zeros(blocks, x.dtype)
        run_views(compiled, blocks, BLOCK, *source_views(kernel, x), partials, init, 0, engine=engine)
        run_views(compiled, 1, BLOCK, *source_views(kernel, partials), out, init, 1, engine=engine)
    return out[0]


# -- reduce -------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", EXECUTORS)
@pytest.mark.parametrize("n", [1, 7, BLOCK, BLOCK + 1, 5000, MAX_BLOCKS * (BLOCK + CHUNK) + 77])
def test_reduce_kernels_sum_exactly(engine, n):
    x = RNG.integers(-1000, 1000, n).astype(np.int32)
    assert _reduce_on(engine, lambda a, b: a + b, x, np.int32(3)) == x.sum() + 3
    f = RNG.integers(-8, 8, n).astype(np.float32)            # exact in float32: any order
    assert _reduce_on(engine, lambda a, b: a + b, f, np.float32(0)) == f.sum()


@pytest.mark.parametrize("engine", EXECUTORS)
def test_reduce_kernels_max_min_and_64_bit(engine):
    x = RNG.standard_normal(3000)
    assert _reduce_on(engine, lambda a, b: max(a, b), x, x[0]) == x.max()
    assert _reduce_on(engine, lambda a, b: min(a, b), x.astype(np.float32), np.float32(0)) == \
        min(x.astype(np.float32).min(), 0)
    def larger_magnitude(a, b):         # statements, not an expression: called, not unrolled
        if abs(a) > abs(b):
            return a
        return b
    y = RNG.standard_normal(2000).astype(np.float32)
    assert _reduce_on(engine, larger_magnitude, y, np.float32(0)) == y[np.argmax(np.abs(y))]
    big = RNG.integers(1 << 40, 1 << 41, 600).astype(np.int64)
    assert _reduce_on(engine, lambda a, b: a + b, big, np.int64(0)) == big.sum()
    # past one unrolled chunk per block: the main loop on register pairs
    many = np.random.default_rng(7).integers(1 << 40, 1 << 41, MAX_BLOCKS * (BLOCK + CHUNK) + 77).astype(np.int64)
    assert _reduce_on(engine, lambda a, b: a + b, many, np.int64(0)) == many.sum()


def test_reduce_first_pass_translates_each_page_in_one_wave():
    # A first-pass block is one wave on its own segment, so each page of the array is
    # translated once (a TLB miss fills 8 pages: kmd/hw/_cu.pxi). Blocks of 8 waves
    # walking one segment took a miss per page per wave: 8x the misses, the mount's
    # slowest part of a 16M reduction (bench (k), docs/umd.md).
    n = 1 << 21
    kernel = reduce_kernel(device_function(lambda a, b: a + b, "test"), np.float32)
    x = np.random.default_rng(5).integers(-8, 8, n).astype(np.float32)
    blocks, _ = plan(n)
    partials = np.zeros(blocks, np.float32)
    result = run_views(build(kernel), blocks, BLOCK, *source_views(kernel, x), partials, np.float32(0), 0,
                       engine="cython", mem_size=16 << 20)
    assert partials.sum() == x.sum()
    pages = x.nbytes // 4096
    assert result.counters["tlb_misses"] <= pages // 8 + 4 * blocks, result.counters
    assert MAX_BLOCKS <= BLOCK                  # pass 2, one block, covers every partial


def test_reduce_of_an_empty_array_returns_init_without_a_device():
    # Numba returns init (converted to the array's dtype) and launches nothing.
    got = K.sum_reduce(np.zeros(0, np.float32), init=2.5)
    assert got == np.float32(2.5) and isinstance(got, np.float32)
    assert K.sum_reduce(np.arange(10, dtype=np.int32), size=0, init=7) == np.int32(7)
    with pytest.raises(TypeError, match="1-D"):
        K.sum_reduce(np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="size"):
        K.sum_reduce(np.zeros(4, np.float32), size=-1)


def test_reduce_refuses_types_kernels_do_not_compute_in():
    with pytest.raises(TypeError, match="uint8"):
        K.sum_reduce(np.ones(4, np.uint8))
    with pytest.raises(TypeError, match="kernel"):
        umd.reduce(K.add_forall)


# -- vectorize ----------------------------------------------------------------------------
def test_vectorize_translates_each_page_in_one_wave():
    # As reduce's first pass: a block is one wave on its own segment, so each page of
    # the three arrays is translated once (blocks of 8 waves took 8x the misses and
    # 4x the engine's time over 16M floats in a mount).
    n = 1 << 20
    rng = np.random.default_rng(6)
    x, y = rng.uniform(1, 2, (2, n)).astype(np.float32)
    out = np.zeros(n, np.float32)
    k = ufunc_kernel(K.rel_diff._fn, [x.dtype] * 2, x.dtype, (False, False))
    grid = launch_blocks(n)
    result = run_views(build(k), grid, VBLOCK, *ufunc_args(k, [x, y], (False, False), out),
                       engine="cython", mem_size=16 << 20)
    np.testing.assert_array_equal(out, (np.float32(2) * (x - y) / (x + y)).astype(np.float32))
    pages = 3 * x.nbytes // 4096
    assert result.counters["tlb_misses"] <= pages // 8 + 6 * grid, result.counters


@pytest.mark.parametrize("engine", EXECUTORS)
@pytest.mark.parametrize("n", [1, 1000, 3 * VCHUNK + 77])
def test_vectorize_kernels(engine, n):
    f = np.float32
    x = RNG.uniform(1, 2, n).astype(f)
    y = RNG.uniform(1, 2, n).astype(f)
    out = np.zeros(n, f)
    fn = K.rel_diff._fn
    grid = launch_blocks(n)
    for scalars, ys, want in (((False, False), y, (f(2) * (x - y) / (x + y)).astype(f)),
                              ((False, True), f(1.5), (f(2) * (x - f(1.5)) / (x + f(1.5))).astype(f))):
        k = ufunc_kernel(fn, [x.dtype] * 2, x.dtype, scalars)
        assert k.unroll == VUNROLL                 # an expression: unrolled
        out[...] = 0
        run_views(build(k), grid, VBLOCK, *ufunc_args(k, [x, ys], scalars, out), engine=engine)
        np.testing.assert_array_equal(out, want)
    g = RNG.standard_normal(n)
    outg = np.zeros(n)
    k = ufunc_kernel(K.gaussian._fn, [g.dtype], g.dtype, (False,))
    assert k.unroll == 1                           # a float64 exp is no cheap expression
    run_views(build(k), grid, VBLOCK, *ufunc_args(k, [g], (False,), outg), engine=engine)
    # float literals (math.pi too) are float32 constants in umd kernels (docs/umd-compiler.md 2.1)
    np.testing.assert_allclose(outg, np.exp(-0.5 * g * g) / np.sqrt(2 * np.pi), rtol=1e-7)


@pytest.mark.parametrize("engine", EXECUTORS)
def test_vectorize_of_a_function_that_is_no_expression(engine):
    # several statements: the kernel calls it as a device function instead of inlining it
    def piecewise(x, y):
        if x > y:
            return x - y
        return 2 * y

    fn = device_function(piecewise, "test")
    x, y = RNG.standard_normal((2, 5000)).astype(np.float32)
    out = np.zeros(5000, np.float32)
    k = ufunc_kernel(fn, [x.dtype] * 2, x.dtype, (False, False))
    run_views(build(k), launch_blocks(5000), VBLOCK, *ufunc_args(k, [x, y], (False, False), out), engine=engine)
    np.testing.assert_array_equal(out, np.where(x > y, x - y, np.float32(2) * y))
    assert inline_expression(fn, ["a", "b"], set()) is None
    assert inline_expression(K.rel_diff._fn, ["a", "b"], set()) == "(2 * (a - b) / (a + b))"


def test_signatures_as_numba_writes_them():
    f4, f8 = np.dtype(np.float32), np.dtype(np.float64)
    assert parse_signature("float32(float32, f4)", "t") == ([(f4, 0), (f4, 0)], (f4, 0))
    assert parse_signature("void(float64[:], f8[:, ::1], u8)", "t") == \
        ([(f8, 1), (f8, 2), (np.dtype(np.uint64), 0)], None)        # Numba's u8 is uint64
    assert parse_signature(f32(f32, f64), "t") == ([(f4, 0), (f8, 0)], (f4, 0))
    assert parse_signature((f64[:], f64[:, :]), "t") == ([(f8, 1), (f8, 2)], None)
    with pytest.raises(TypeError, match="unknown type 'float128'"):
        parse_signature("float32(float128)", "t")
    assert K.scaled_sum.types == [(f4, f4)] and K.scaled_sum.results == [f4]   # from annotations
    assert parse_layout("(m,n),(n)->(m)", "t") == ([("m", "n"), ("n",)], [("m",)])


def test_vectorize_signature_mismatch_is_a_clear_error():
    with pytest.raises(TypeError, match=r"no signature takes \(int32, float32\).*casting='no'"):
        K.rel_diff(np.ones(4, np.int32), np.ones(4, np.float32))
    two = umd.vectorize(["float32(float32, float32)", "float32(float32, float64)"])(lambda x, y: x + y)
    with pytest.raises(TypeError, match="several signatures"):
        two(np.ones(4, np.float32), 2)        # an int scalar is neither: both fit it
    with pytest.raises(TypeError, match="has 1 arguments"):
        umd.vectorize(["float32(float32)"])(lambda x, y: x + y)
    with pytest.raises(TypeError, match="annotate"):
        umd.vectorize(lambda x, y: x + y)
    with pytest.raises(ValueError, match="target='cuda'"):
        umd.vectorize(["float32(float32)"], target="cpu")
    with pytest.raises(TypeError, match="umd.guvectorize"):
        umd.vectorize(["float32(float32[:])"])(lambda x: x)


# -- guvectorize --------------------------------------------------------------------------
@pytest.mark.parametrize("engine", EXECUTORS)
def test_guvectorize_kernels(engine):
    a, b = RNG.standard_normal((2, 40, 9)).astype(np.float32)
    r = np.zeros((40, 1), np.float32)
    f32_2 = (np.dtype(np.float32), 2)
    run(build(gufunc_kernel(K.dot._fn, [f32_2] * 3)), 2, 32, a, b, r, 40, engine=engine)
    np.testing.assert_allclose(r[:, 0], (a.astype(np.float64) * b).sum(1), rtol=1e-5, atol=1e-5)
    A, B = RNG.standard_normal((6, 3, 4)), RNG.standard_normal((6, 4, 5))
    C = np.zeros((6, 3, 5))
    f64_3 = (np.dtype(np.float64), 3)
    run(build(gufunc_kernel(K.matmul._fn, [f64_3] * 3)), 1, 32, A, B, C, 6, engine=engine)
    # a sum in another order than numpy's: within a few ulp of the terms' magnitude
    # (a cancelling sum's relative error is unbounded)
    assert (np.abs(C - A @ B) <= 1e-14 * (np.abs(A) @ np.abs(B))).all()


def test_guvectorize_checks_layout_and_signatures():
    with pytest.raises(TypeError, match="layout"):
        umd.guvectorize(["void(float32[:], float32[:])"], "(n)->(n)(")(lambda x, y: None)
    with pytest.raises(TypeError, match="returns nothing"):
        umd.guvectorize(["float32(float32[:], float32[:])"], "(n)->(n)")(lambda x, y: None)
    with pytest.raises(TypeError, match="takes 3"):
        umd.guvectorize(["void(float32[:], float32[:])"], "(n)->(n)")(lambda x, y, z: None)
    with pytest.raises(TypeError, match=r"no signature takes \(float64, float64\)"):
        K.dot(np.ones((2, 3)), np.ones((2, 3)))


# -- forall -------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, error", [(-1, ValueError), (2.5, TypeError), ("8", TypeError),
                                        (True, TypeError), (None, TypeError)])
def test_forall_refuses_bad_sizes(bad, error):
    with pytest.raises(error, match="forall: ntasks"):
        K.add_forall.forall(bad)


def test_forall_options_and_no_tasks():
    with pytest.raises(ValueError, match="tpb=2048"):
        K.add_forall.forall(10, tpb=2048)
    with pytest.raises(ValueError, match="tpb"):
        K.add_forall.forall(10, tpb=-32)
    f = K.add_forall.forall(0)
    assert isinstance(f, ForAll) and f() is None           # nothing to launch, no device opened
    assert "forall" in repr(K.add_forall.forall(5))


# -- one function for host and device -----------------------------------------------------
def test_device_function_runs_as_python_on_the_host():
    assert K.clamp(5, 0, 3) == 3 and K.clamp(-1.5, 0.0, 1.0) == 0.0 and K.clamp(2, 0, 3) == 2
    assert K.inverse(4.0) == 0.25
    with pytest.raises(ZeroDivisionError):
        K.inverse(0.0)                            # the host call's exception, unchanged


@pytest.mark.parametrize("engine", EXECUTORS)
def test_device_function_gives_the_same_results_in_a_kernel(engine):
    x = RNG.uniform(-2, 2, 200).astype(np.float32)
    out = np.zeros(200, np.float32)
    run(build(K.clamp_kernel), 4, 64, x, out, np.float32(-1), np.float32(1), engine=engine)
    np.testing.assert_array_equal(out, [K.clamp(v, np.float32(-1), np.float32(1)) for v in x])


@pytest.mark.parametrize("engine", EXECUTORS)
def test_jit_module_makes_device_functions(engine):
    from . import jit_module_funcs as M
    for fn in (M.inc, M.add, M.inc_add):
        assert isinstance(fn, DeviceFunction)
    assert M.mean is np.mean and isinstance(M.call_inc_add, umd.Kernel)   # left alone
    assert M.inc_add(3) == 7
    x = np.arange(70, dtype=np.float32)
    run(build(M.call_inc_add), 3, 32, x, engine=engine)
    np.testing.assert_array_equal(x, [M.inc_add(v) for v in np.arange(70, dtype=np.float32)])


def test_jit_module_options_are_checked():
    with pytest.raises(TypeError, match="unknown option"):
        umd.jit_module(bogus=True)


# -- the numba.cuda names -----------------------------------------------------------------
def test_every_documented_numba_cuda_name_exists_or_says_what_to_use():
    for name in PROVIDED:
        obj = umd
        for part in name.split("."):
            if isinstance(getattr(type(obj), part, None), property):
                break                             # gpus.current: opens a device
            obj = getattr(obj, part)              # AttributeError: a name umd lost
    for name, advice in MISSING.items():
        if hasattr(umd, name):                    # provided since the list was written
            continue
        with pytest.raises(AttributeError) as e:
            getattr(umd, name)
        msg = str(e.value)
        assert msg.startswith(f"umd.{name}: not in umd; ") and ("use" in msg or "not supported" in msg), msg
    with pytest.raises(AttributeError, match="module 'umd' has no attribute 'no_such_name'"):
        umd.no_such_name
    assert not hasattr(umd, "no_such_name")
