"""Memcheck (umd/memcheck.py, docs/umd.md "Memcheck") end to end: each test runs a
client process on a mount, with VGPU_MEMCHECK=1 or umd.memcheck.enable(), and checks
the report of each kind of error: a read and a write out of bounds (the kernel, block,
thread, source line and its text, array argument, offset), a kernel's use of freed
memory, a double free, a use after free on the host, leaks at exit; and that without
memcheck the same out-of-bounds accesses inside the pool's block go unnoticed."""
import inspect
import re

from . import memcheck_kernels as K
from .test_runtime import client, ok

IMPORTS = """
        from tests.umd import memcheck_kernels as K
"""


def _line_of(fn, text):
    src, start = inspect.getsourcelines(fn.fn)
    return start + next(k for k, t in enumerate(src) if text in t)


def _env(tmp_path, on=True):
    env = {"VGPU_CACHE_DIR": str(tmp_path)}
    env["VGPU_MEMCHECK"] = "1" if on else "0"
    return env


UNGUARDED = IMPORTS + """
        x = umd.to_device(np.arange(1000, dtype=np.float32))
        out = umd.zeros(1000, np.float32)
        try:
            K.double_unguarded[4, 256](x, out)       # threads 1000..1023 are past the end
            umd.synchronize()
            print("no error;", out.copy_to_host()[-1])
        except umd.GPUFault as e:
            print("caught", type(e).__name__)
"""


def test_out_of_bounds_read_inside_the_pool_block_is_missed_without_memcheck(vgpu_mount, tmp_path):
    r = ok(client(UNGUARDED, vgpu_mount, env_extra=_env(tmp_path, on=False)))
    assert "no error; 1998.0" in r.stdout, r.stdout      # the 4 KiB block hid the bug
    assert "=========" not in r.stderr


def test_out_of_bounds_read_is_reported(vgpu_mount, tmp_path):
    r = ok(client(UNGUARDED, vgpu_mount, env_extra=_env(tmp_path)))
    assert "caught MemcheckError" in r.stdout, (r.stdout, r.stderr)
    line = _line_of(K.double_unguarded, "out[i] = x[i]")
    err = r.stderr
    assert "========= Invalid __global__ read of size 4 bytes" in err
    assert f"in kernel 'double_unguarded' (" in err and f"memcheck_kernels.py:{line})" in err
    assert "=========         out[i] = x[i] * 2.0" in err
    # block 3 starts at thread 768: thread 232 is element 1000, the first one past the end
    assert "by thread (232,0,0) in block (3,0,0)" in err
    assert re.search(r"is out of bounds: element 1000, byte offset 4000 of array argument 'x', "
                     r"a float32 array of shape \(1000,\) \(4000 bytes\), 0 bytes past its end", err), err
    assert re.search(r"allocated at <string>:\d+", err)
    assert "ERROR SUMMARY: 1 error(s)" in err


def test_out_of_bounds_write_is_reported(vgpu_mount, tmp_path):
    r = ok(client(IMPORTS + """
        out = umd.zeros(100, np.float32)
        try:
            K.write_past_end[1, 128](out, 5)
            umd.synchronize()
            print("no error")
        except umd.MemcheckError as e:
            assert e.kernel == "write_past_end" and e.address == out.ptr + 400
            print("caught")
        K.write_past_end[1, 128](out, 0)                 # the stream goes on
        assert (out.copy_to_host() == 1).all()
        print("ok after")
    """, vgpu_mount, env_extra=_env(tmp_path)))
    assert "caught" in r.stdout and "ok after" in r.stdout, (r.stdout, r.stderr)
    err = r.stderr
    assert "Invalid __global__ write of size 4 bytes" in err
    assert "out[i + extra] = 1.0" in err
    assert "by thread (95,0,0) in block (0,0,0)" in err       # 95 + 5 = 100: the first past
    assert "element 100, byte offset 400 of array argument 'out'" in err


def test_strided_overflow_into_a_neighbour_is_reported(vgpu_mount, tmp_path):
    code = IMPORTS + """
        out = umd.to_device(np.zeros(1000, np.float32))
        neighbour = umd.to_device(np.zeros(1000, np.float32))
        try:
            K.write_past_end[1, 1024](out, 1024)         # 4 KiB on: the next block
            umd.synchronize()
            print("no error; neighbour overwritten:", bool((neighbour.copy_to_host() == 1).all()))
        except umd.MemcheckError as e:
            print("caught")
    """
    r = ok(client(code, vgpu_mount, env_extra=_env(tmp_path, on=False)))
    assert "no error; neighbour overwritten: True" in r.stdout, (r.stdout, r.stderr)
    r = ok(client(code, vgpu_mount, env_extra=_env(tmp_path)))
    assert "caught" in r.stdout, (r.stdout, r.stderr)
    assert "element 1024, byte offset 4096 of array argument 'out', a float32 array of shape " \
           "(1000,) (4000 bytes), 96 bytes past its end" in r.stderr, r.stderr
    assert "by thread (0,0,0) in block (0,0,0)" in r.stderr


def test_shared_memory_overrun_is_reported(vgpu_mount, tmp_path):
    r = ok(client(IMPORTS + """
        out = umd.zeros(256, np.float32)
        try:
            K.shared_overrun[1, 256](out)
            umd.synchronize()
            print("no error")
        except umd.MemcheckError as e:
            print("caught")
    """, vgpu_mount, env_extra=_env(tmp_path)))
    assert "caught" in r.stdout, (r.stdout, r.stderr)
    err = r.stderr
    assert "Invalid __shared__ write of size 4 bytes" in err and "tile[t] = out[t]" in err
    # 64 floats are 256 bytes; the workgroup gets a 512-byte granule: thread 128 is the first out
    assert "by thread (128,0,0) in block (0,0,0)" in err
    assert "Address 0x200 is out of bounds: the workgroup has 512 bytes of shared memory (the " \
           "kernel's 256, in 512-byte granules); element 128 of the shared array at LDS offset 0" in err, err


def test_kernel_use_of_freed_memory_is_reported(vgpu_mount, tmp_path):
    r = ok(client(IMPORTS + """
        a = umd.zeros(256, np.float32)
        stale = a.ptr
        a.free()                                         # FREED HERE
        try:
            K.touch[1, 32](stale)
            umd.synchronize()
            print("no error")
        except umd.MemcheckError as e:
            print("caught")
    """, vgpu_mount, env_extra=_env(tmp_path)))
    assert "caught" in r.stdout, (r.stdout, r.stderr)
    err = r.stderr
    assert "Invalid __global__ write of size 4 bytes" in err and "p[umd.grid(1)] = 3.0" in err
    assert "is in freed memory: element 0, byte offset 0 of array argument 'p', a float32 array " \
           "of shape (256,)" in err, err
    assert re.search(r"freed at <string>:\d+", err)


def test_double_free_and_use_after_free_are_reported(vgpu_mount, tmp_path):
    r = ok(client("""
        umd.memcheck.enable()                            # the in-program switch
        a = umd.zeros((4, 8), np.int32)
        a.free()
        try:
            a.free()
        except umd.MemcheckError as e:
            print("double free caught")
        b = umd.zeros(8, np.float32)
        b.free()
        try:
            b.copy_to_host()
        except umd.MemcheckError as e:
            print("use after free caught")
    """, vgpu_mount, env_extra={"VGPU_CACHE_DIR": str(tmp_path)}))
    assert "double free caught" in r.stdout and "use after free caught" in r.stdout, r.stdout
    err = r.stderr
    assert "========= Double free of <DeviceArray shape=(4, 8) dtype=int32 at freed> " \
           "(an int32 array of shape (4, 8))" in err, err
    m = re.search(r"freed again at <string>:(\d+)\n=========     first freed at <string>:(\d+)\n"
                  r"=========     allocated at <string>:(\d+)", err)
    again, first, made = map(int, m.groups())
    assert (again - made, first - made) == (3, 1), err              # the client's own lines
    assert "Use after free of <DeviceArray shape=(8,) dtype=float32 at freed>" in err
    assert "ERROR SUMMARY: 2 error(s)" in err


def test_leaks_are_listed_at_exit(vgpu_mount, tmp_path):
    r = ok(client("""
        kept = umd.zeros(1000, np.float32)               # never freed
        gone = umd.zeros(10, np.float32)
        gone.free()
        tmp = umd.zeros(5, np.float32)
        del tmp                                          # freed by the garbage collector
    """, vgpu_mount, env_extra=_env(tmp_path)))
    err = r.stderr
    assert "LEAK SUMMARY: 1 allocation(s) not freed, 4000 bytes" in err, err
    assert re.search(r"4000 bytes \(a float32 array of shape \(1000,\)\) at 0x[0-9a-f]+, "
                     r"allocated at <string>:\d+", err)
    assert "ERROR SUMMARY: 0 error(s)" in err


def test_off_means_the_plain_pool(vgpu_mount, tmp_path):
    r = ok(client("""
        from umd.memory import MemoryPool
        dev = umd.get_device()
        assert type(dev.pool) is MemoryPool, type(dev.pool)
        a = umd.zeros(10, np.float32)
        a.free()
        a.free()                                         # nothing to report: a no-op
        try:
            a.ptr
        except ValueError as e:
            print(e)
    """, vgpu_mount, env_extra=_env(tmp_path, on=False)))
    assert "DeviceArray was freed" in r.stdout and "=========" not in r.stderr


def test_shared_quad_read_names_its_first_element_out_of_bounds():
    # The compiler merges four consecutive shared reads into one ds_read_b128
    # (compiler/lds_quads.py): a quad at 504 in 512 bytes faults on its third element,
    # which is the read the report names (as the four separate reads would have).
    from umd import memcheck
    from vgpu import isa
    inst = isa.decode(isa.encode(isa.FMT_MEM, isa.BY_NAME["ds_read_b128"].code,
                                 isa.OPR_VGPR + 8, isa.OPR_VGPR + 4, 0, 0, 16))
    vgprs = [[0] * 32 for _ in range(12)]
    vgprs[4] = [16 * k for k in range(32)]          # + 16: lanes 0..29 fit
    vgprs[4][30] = 488                              # 504: elements 122, 123 fit, 124 does not
    lane, addr, detail = memcheck._shared_access(512, inst, {"vgprs": vgprs, "exec": 0xFFFFFFFF})
    assert (lane, addr) == (30, 512)
    assert "element 124 of the shared array at LDS offset 16" in detail[0]


def test_shared_pair_read_names_its_out_of_bounds_address():
    # A ds_read2_b32 (compiler/lds_pairs.py) at dwords 2 and 100 past 4 * lane: lane 28's
    # second dword (4 * 28 + 400 = 512) is the first past 512 bytes.
    from umd import memcheck
    from vgpu import isa
    inst = isa.decode(isa.encode(isa.FMT_MEM, isa.OP_DS_READ2_B32, isa.OPR_VGPR + 8,
                                 isa.OPR_VGPR + 4, 0, 0, 2 | 100 << 8))
    vgprs = [[0] * 32 for _ in range(12)]
    vgprs[4] = [4 * k for k in range(32)]
    lane, addr, detail = memcheck._shared_access(512, inst, {"vgprs": vgprs, "exec": 0xFFFFFFFF})
    assert (lane, addr) == (28, 512)
    assert "a paired read of the dwords 2 and 100 past address 0x70" in detail[0]
