"""Numba CUDA programs as their authors wrote them (issue #25, the compiler and engine
half), on both executors without a mount (tests/umd/refrun.py), against numpy:
dynamic shared memory and its LDS limit, cooperative groups (the grid barrier, its
rank and size, the cooperative limit), and the compile errors of each."""
import numpy as np
import pytest

import umd
from umd import f32, i32
from umd import launch as L
from umd.compiler import KernelCompileError, build
from vgpu import isa

from . import numba_program_kernels as K
from .refrun import run

RNG = np.random.default_rng(25)
ENGINES = ("reference", "cython")


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.param


# -- dynamic shared memory ----------------------------------------------------------------
def test_dynamic_shared_array_is_sized_by_the_launch(engine):
    n, block = 200, 64
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    compiled = build(K.reverse_block)
    assert compiled.dynamic_shared and compiled.lds_bytes == 0
    run(compiled, 4, block, x, out, shared_bytes=block * 4, engine=engine)
    want = np.zeros(n, np.float32)
    for b in range(4):
        for t in range(block):
            i, j = b * block + t, b * block + block - 1 - t
            if i < n and j < n:
                want[i] = x[j]
    np.testing.assert_array_equal(out, want)


def test_dynamic_shared_arrays_alias_one_region(engine):
    out = np.zeros(2, np.int32)
    run(build(K.aliased_views), 1, 1, out, shared_bytes=16, engine=engine)
    assert out[0] == np.float32(3.14).view(np.int32)
    assert out[1] == 4                                  # 16 bytes of float32


def test_disjoint_dynamic_shared_arrays_are_slices_of_the_region(engine):
    # Numba's user/memory.rst example: f32_arr[0] is 3.14, i32_arr (one word in) is 1
    out = np.zeros(4, np.int32)
    run(build(K.disjoint_views), 1, 1, out, shared_bytes=8, engine=engine)
    assert out.tolist() == [1, np.float32(3.14).view(np.int32), 1, 1]


@pytest.mark.parametrize("lo, hi", [(0, 20), (2, 5), (-4, -1), (5, 2), (-100, 100), (19, 40)])
def test_slices_in_kernels_are_views_as_in_numpy(engine, lo, hi):
    x = RNG.standard_normal(20).astype(np.float32)
    m = RNG.standard_normal((3, 7)).astype(np.float32)
    out = np.zeros(5 + 20, np.float32)
    run(build(K.slice_reads), 1, 32, x, m, lo, hi, out, engine=engine)
    s = x[lo:hi]
    assert out[0] == len(s)
    assert out[1] == x[-3:][-1] + x[-3:][0]
    assert out[2] == np.float32(len(m[1][2:])) + m[1][2]
    assert out[3] == np.float32(4) + x[1:][2:6][-1]
    assert out[4] == 1.0
    np.testing.assert_array_equal(out[5:5 + len(s)], s)


def test_unsupported_slices_say_what_to_use():
    def strided(x: f32[:], out: f32[:]):
        out[0] = x[::2][0]

    def two_d(m: f32[:, :], out: f32[:]):
        out[0] = m[1:][0, 0]
    for fn, what in ((strided, "step"), (two_d, "2-D")):
        with pytest.raises(KernelCompileError, match=what) as e:
            build(umd.jit(fn))
        assert "a[lo + i]" in str(e.value) or "index" in str(e.value)


def test_dynamic_shared_memory_follows_the_static_arrays(engine):
    compiled = build(K.static_and_dynamic)
    assert compiled.lds_bytes == 64                     # 16 f32, the dynamic part after
    out = np.zeros(32, np.float32)
    run(compiled, 1, 32, out, shared_bytes=32 * 4, engine=engine)
    np.testing.assert_array_equal(out, 3.0 + np.arange(32, dtype=np.float32))


def test_too_much_dynamic_shared_memory_is_refused_at_launch():
    compiled = build(K.static_and_dynamic)
    assert L.launch_lds_bytes(compiled, 1024) == 64 + 1024
    with pytest.raises(umd.LaunchError, match=r"64 bytes of static shared memory \+ 65536 "
                                              r"bytes of dynamic.*at most 65536"):
        L.launch_lds_bytes(compiled, isa.MAX_LDS_BYTES)
    with pytest.raises(umd.LaunchError, match="dynamic shared memory"):
        L.launch_lds_bytes(compiled, -4)


def test_dynamic_shared_array_of_small_type_is_a_compile_error():
    @umd.jit
    def k(out: i32[:]):
        b = umd.shared.array(0, np.uint8)
        out[0] = b[0]
    with pytest.raises(KernelCompileError, match=r"test_numba_kernels.py:\d+: k: .*dynamic shared "
                                                 "array of u8"):
        build(k)


def test_launch_config_takes_stream_and_shared_memory():
    k = K.reverse_block
    launcher = k[4, 64, 0, 256]
    assert (launcher.grid, launcher.block, launcher.stream, launcher.sharedmem) == (4, 64, 0, 256)
    assert k[4, 64].sharedmem == 0
    with pytest.raises(TypeError, match=r"\[grid, block, stream, sharedmem\]"):
        k[1, 2, 3, 4, 5]


# -- cooperative groups -------------------------------------------------------------------
def test_grid_sync_every_block_sees_every_partial(engine):
    n, block, blocks = 1000, 64, 16
    x = RNG.integers(-8, 8, n).astype(np.float32)
    partial = np.zeros(blocks, np.float32)
    out = np.zeros(blocks, np.float32)
    compiled = build(K.neighbour_sums)
    assert compiled.cooperative and "s_barrier_grid" in compiled.asm_text
    run(compiled, blocks, block, x, partial, out, engine=engine)
    want = np.array([x[b * block:(b + 1) * block].sum() for b in range(blocks)], np.float32)
    np.testing.assert_array_equal(partial, want)
    np.testing.assert_array_equal(out, np.full(blocks, want.sum(), np.float32))


def test_grid_sync_in_a_loop(engine):
    rounds, n = 6, 300
    data = np.zeros(rounds * n, np.int32)
    data[:n] = np.arange(n)
    run(build(K.sequence_of_syncs), 5, 64, data, rounds, engine=engine)
    want = np.zeros((rounds, n), np.int32)
    want[0] = np.arange(n)
    for r in range(1, rounds):
        want[r] = np.roll(want[r - 1], 1) + 1
    np.testing.assert_array_equal(data.reshape(rounds, n), want)


def test_grid_group_rank_and_size(engine):
    grid, block = (3, 2), (8, 4)
    total = 3 * 2 * 8 * 4
    out = np.full((total, 2), -1, np.int32)
    run(build(K.grid_group_rank), grid, block, out, engine=engine)
    np.testing.assert_array_equal(out[:, 0], np.arange(total))
    assert (out[:, 1] == total).all()


def test_a_kernel_without_grid_sync_is_not_cooperative():
    assert not build(K.no_grid_sync).cooperative
    assert not build(K.reverse_block).cooperative


def test_max_cooperative_grid_blocks_from_the_hardware_model():
    compiled = build(K.neighbour_sums)
    per_cu = isa.max_resident_workgroups(64, compiled.sgprs, compiled.vgprs, compiled.lds_bytes)
    assert L.max_cooperative_blocks(compiled, 64, 0, cus=2) == 2 * per_cu
    assert L.max_cooperative_blocks(compiled, (16, 4), 0, cus=2) == 2 * per_cu
    lds = isa.max_resident_workgroups(64, compiled.sgprs, compiled.vgprs, compiled.lds_bytes + 30000)
    assert L.max_cooperative_blocks(compiled, 64, 30000, cus=2) == 2 * lds == 4
    # past the limit, the launch is refused as CUDA refuses it
    L.check_cooperative(compiled, (2 * per_cu, 1, 1), (64, 1, 1), 0, cus=2)
    with pytest.raises(umd.LaunchError, match=r"cooperative launch too large.*neighbour_sums.*"
                                              r"33 blocks.*at most 32.*max_cooperative_grid_blocks"):
        L.check_cooperative(compiled, (2 * per_cu + 1, 1, 1), (64, 1, 1), 0, cus=2)
    # a kernel that does not sync its grid has no such limit
    L.check_cooperative(build(K.no_grid_sync), (1 << 20, 1, 1), (64, 1, 1), 0, cus=2)


def test_past_the_limit_the_engine_faults_rather_than_hang(engine):
    compiled = build(K.neighbour_sums)
    cap = L.max_cooperative_blocks(compiled, 64, 0, cus=2)
    x = np.ones(64 * (cap + 1), np.float32)
    partial, out = np.zeros(cap + 1, np.float32), np.zeros(cap + 1, np.float32)
    r = run(compiled, cap + 1, 64, x, partial, out, engine=engine, status="fault")
    assert r.reason == "illegal_instruction" and r.workgroup == (cap, 0, 0)


def test_grid_group_misuse_is_a_compile_error():
    @umd.jit
    def k(out: i32[:]):
        g = umd.cg.this_grid()
        out[0] = g.rank
    with pytest.raises(KernelCompileError, match=r"test_numba_kernels.py:\d+: k: a grid group .*"
                                                 r"has \.sync\(\), \.size and \.thread_rank\(\), not "
                                                 r"\.rank"):
        build(k)

    @umd.jit
    def k2(out: i32[:]):
        umd.cg.this_grid().sync(1)
    with pytest.raises(KernelCompileError, match="takes no arguments"):
        build(k2)


# -- array names rebound at run time ------------------------------------------------------
def test_array_name_bound_in_divergent_branches(engine):
    n = 150
    x, y = RNG.standard_normal((2, n)).astype(np.float32)
    flag = RNG.integers(-1, 2, n).astype(np.int32)
    out = np.zeros(n, np.float32)
    run(build(K.pick_divergent), 3, 64, x, y, flag, out, engine=engine)
    np.testing.assert_array_equal(out, np.where(flag > 0, x, y) * np.float32(2))


def test_array_name_bound_on_a_uniform_condition_with_its_shape(engine):
    x = RNG.standard_normal(40).astype(np.float32)
    y = RNG.standard_normal(70).astype(np.float32)
    compiled = build(K.pick_uniform)
    for use_x, want in ((1, x + np.float32(1)), (0, y + np.float32(1))):
        out = np.zeros(70, np.float32)
        run(compiled, 2, 64, x, y, use_x, out, engine=engine)
        np.testing.assert_array_equal(out[:len(want)], want)
        assert (out[len(want):] == 0).all()


def _smooth(v, steps):
    v = v.astype(np.float32)
    for _ in range(steps):
        w = v.copy()
        w[1:-1] = ((v[:-2] + v[1:-1]).astype(np.float32) + v[2:]) / np.float32(3)
        v = w
    return v


@pytest.mark.parametrize("steps", [1, 4])
def test_buffers_swapped_in_a_loop(engine, steps):
    n = 100
    a = RNG.standard_normal(n).astype(np.float32)
    b = np.zeros(n, np.float32)
    want = _smooth(a, steps)
    run(build(K.ping_pong), 1, 128, a, b, steps, engine=engine)
    np.testing.assert_array_equal(a if steps % 2 == 0 else b, want)


def test_shared_buffers_swapped_in_a_loop(engine):
    x = RNG.standard_normal(128).astype(np.float32)
    out = np.zeros(128, np.float32)
    run(build(K.ping_pong_shared), 1, 128, x, out, 5, engine=engine)
    np.testing.assert_array_equal(out, _smooth(x, 5))


def test_rebinding_to_another_type_is_a_compile_error():
    @umd.jit
    def k(x: f32[:], y: i32[:], out: f32[:]):
        src = x
        if out.size > 3:
            src = y
        out[0] = src[0]
    with pytest.raises(KernelCompileError, match=r"test_numba_kernels.py:\d+: k: 'src' is bound to an "
                                                 r"array f32\[:\] and to an array i32\[:\]: every "
                                                 "binding of an array name must have the same type"):
        build(k)

    @umd.jit
    def k2(x: f32[:], y: f32[:, :], out: f32[:]):
        src = x
        if out.size > 3:
            src = y
        out[0] = src[0]
    with pytest.raises(KernelCompileError, match=r"'src' is bound to an array f32\[:\] and to an "
                                                 r"array f32\[:, :\]"):
        build(k2)


# -- device arrays named as globals -------------------------------------------------------
class StandIn:
    """What the compiler sees of a DeviceArray: __cuda_array_interface__, dtype, shape."""

    __cuda_array_interface__: dict = {}

    def __init__(self, a):
        self.dtype, self.shape = a.dtype, a.shape

    def is_c_contiguous(self):
        return True


def test_device_arrays_named_as_globals_are_used_in_place(engine, monkeypatch):
    coeffs = RNG.standard_normal(7).astype(np.float32)
    hits = np.zeros(1, np.int32)
    monkeypatch.setattr(K, "GLOBAL_COEFFS", StandIn(coeffs))
    monkeypatch.setattr(K, "GLOBAL_HITS", StandIn(hits))
    compiled = build(K.scale_by_global)
    assert sorted(compiled.captured) == ["__global_0", "__global_1"]
    assert compiled.captured["__global_0"][2] == "GLOBAL_COEFFS"
    n = 100
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    run(compiled, 2, 64, x, out, engine=engine,
        captured={"__global_0": coeffs, "__global_1": hits})
    np.testing.assert_array_equal(out, x * np.resize(coeffs, n))
    assert hits[0] == n                                 # written in place


def test_captured_arrays_are_looked_up_at_the_launch(monkeypatch):
    from umd.launch import captured_arrays
    monkeypatch.setattr(K, "GLOBAL_COEFFS", StandIn(np.zeros(3, np.float32)))
    monkeypatch.setattr(K, "GLOBAL_HITS", StandIn(np.zeros(1, np.int32)))
    compiled = build(K.scale_by_global)
    got = captured_arrays(compiled, K.scale_by_global.fn, K.scale_by_global.env)
    assert got == {"__global_0": K.GLOBAL_COEFFS, "__global_1": K.GLOBAL_HITS}


HOST_TABLE = np.arange(4, dtype=np.float32)


def test_writing_a_global_numpy_array_is_a_compile_error():
    @umd.jit
    def k(out: f32[:]):
        HOST_TABLE[0] = out[0]
    with pytest.raises(KernelCompileError, match=r"test_numba_kernels.py:\d+: k: .*global numpy "
                                                 "array, which kernels capture as a constant"):
        build(k)

    @umd.jit
    def k2(out: f32[:]):
        out[0] = HOST_TABLE[3]                          # reading it is fine (a constant)
    out = np.zeros(1, np.float32)
    run(build(k2), 1, 1, out)
    assert out[0] == 3


# -- ufuncs on whole arrays ---------------------------------------------------------------
def test_ufunc_on_whole_arrays_with_an_output(engine):
    x = RNG.uniform(-4, 4, 50).astype(np.float32)
    r = np.zeros(50, np.float32)
    run(build(K.ufunc_sin), 1, 1, x, r, engine=engine)
    np.testing.assert_array_equal(r, np.sin(x.astype(np.float64)).astype(np.float32))


def test_binary_ufuncs_on_2d_arrays(engine):
    a, b = RNG.standard_normal((2, 5, 7)).astype(np.float32)
    total, hyp = np.zeros((5, 7), np.float32), np.zeros((5, 7), np.float32)
    run(build(K.ufuncs_2d), 1, 32, a, b, total, hyp, engine=engine)
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_allclose(hyp, np.hypot(a.astype(np.float64), 2.0), rtol=2.4e-7)


def test_ufunc_on_arrays_needs_its_output():
    @umd.jit
    def k(x: f32[:], out: f32[:]):
        y = np.sin(x)
    with pytest.raises(KernelCompileError, match=r"test_numba_kernels.py:\d+: k: np.sin\(\) on arrays "
                                                 "in a kernel takes 1 input.*output array last"):
        build(k)

    @umd.jit
    def k2(x: f32[:], out: f32[:, :]):
        np.cos(x, out)
    with pytest.raises(KernelCompileError, match="no broadcasting"):
        build(k2)


# -- umd.declare_device -------------------------------------------------------------------
def test_declared_device_functions_are_linked_from_python_files(engine):
    x = RNG.standard_normal(90).astype(np.float32)
    out = np.zeros(90, np.float32)
    run(build(K.uses_declared, K.uses_declared.options), 2, 64, x, out, engine=engine)
    f = np.float32
    head = f(f(f(x[0] + x[1]) + x[2]) + x[3])
    np.testing.assert_array_equal(out, (np.clip(x, f(-0.5), f(0.5)) + head).astype(f))


def test_a_cpointer_parameter_takes_cffi_from_buffer_of_an_array(engine):
    pytest.importorskip("cffi")
    x = np.arange(10, dtype=np.float32)
    r = np.ndarray((), dtype=np.float32)
    run(build(K.from_buffer_caller, K.from_buffer_caller.options), 1, 1, r, x, engine=engine)
    assert r[()] == 45.0


def test_declare_device_signatures():
    from umd.compiler.linking import parse_signature
    assert parse_signature("float32(CPointer(float32), int32)")[1][0] == umd.Ptr[umd.f32]
    ret, args = parse_signature("float32(float32[:, ::1], int32, u8)")
    assert ret == umd.f32
    assert args[0].ndim == 2 and args[1] == umd.i32 and args[2] == umd.u64   # Numba's u8: uint64
    assert parse_signature("void(float64[:])")[0] is None
    with pytest.raises(TypeError, match="unknown type 'float128'"):
        umd.declare_device("f", "float128(int32)")
    with pytest.raises(TypeError, match="link= takes a list of file paths"):
        umd.declare_device("f", "void()", link=3)


missing_impl = umd.declare_device("not_there", "float32(float32)")


def test_a_declaration_without_an_implementation_is_a_compile_error():
    @umd.jit(link=["linked_functions.py"])
    def k(x: f32[:]):
        x[0] = missing_impl(x[0])
    with pytest.raises(KernelCompileError, match=r"test_numba_kernels.py:\d+: k: not_there is declared "
                                                 r"with umd.declare_device.*no implementation is linked: "
                                                 r"none of link=\['linked_functions.py'\] defines it"):
        build(k, k.options)

    @umd.jit
    def k2(x: f32[:]):
        x[0] = missing_impl(x[0])
    with pytest.raises(KernelCompileError, match=r"the kernel has no link= files"):
        build(k2, k2.options)

    @umd.jit(link=["kernels.cu"])
    def k3(x: f32[:]):
        x[0] = missing_impl(x[0])
    with pytest.raises(KernelCompileError, match=r"link='kernels.cu': vgpu runs vISA, not PTX or CUDA C"):
        build(k3, k3.options)


def test_declared_argument_types_are_checked():
    @umd.jit(link=["linked_functions.py"])
    def k(x: i32[:], out: f32[:]):
        out[0] = K.sum_reduce(x, 3)
    with pytest.raises(KernelCompileError, match=r"sum_reduce\(\): argument 1 is f32\[:\]"):
        build(k, k.options)


def test_overloads_name_the_one_compiled_kernel():
    ov = K.neighbour_sums.overloads[(umd.f32[:], umd.f32[:], umd.f32[:])]
    assert ov.cooperative and not K.no_grid_sync.overloads[()].cooperative
    assert len(K.neighbour_sums.overloads) == 1
