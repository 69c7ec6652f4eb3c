"""umd.profile(): per-launch counters read back from the driver (VGPU_INFO_JOB_COUNTERS),
end to end on a mount, with known counts: a kernel's lane-instructions equal the count
derived from its disassembly and its grid."""
from .test_runtime import client, ok


def test_launch_counters_match_the_disassembly_and_grid(vgpu_mount):
    ok(client("""
        import libvgpu
        from vgpu import isa
        k = hand_kernel("vector_add")
        code = asm.disassemble(libvgpu.code_object_parse(k.code_object).code)
        ninst = sum(1 for line in code.splitlines() if line.split() and line.split()[0] in isa.BY_NAME)
        valu = sum(1 for line in code.splitlines() if line.split() and line.split()[0].startswith("v_"))
        sizes = (64 * 40, 64 * 3)                      # whole workgroups: every lane active
        arrays = [[umd.to_device(np.ones(n, np.float32)) for _ in range(3)] for n in sizes]
        with umd.profile() as prof:
            for n, (a, b, c) in zip(sizes, arrays):
                umd.launch_kernel(k, n // 64, 64, [a, b, c, n])
        assert [l.name for l in prof.launches] == ["vector_add", "vector_add"]
        for n, launch, (a, b, c) in zip(sizes, prof.launches, arrays):
            got = launch.counters
            waves = n // 32
            assert got["error"] == 0 and got["dispatches"] == 1 and got["waves"] == waves, got
            assert got["instructions"] == ninst * waves, (got, ninst)
            assert got["lane_instructions"] == ninst * waves * 32, got
            assert got["valu"] == valu * waves and got["vmem"] == 3 * waves, got
            assert got["bytes_stored"] == 4 * n and got["bytes_loaded"] == 28 * waves + 8 * n, got
            assert got["busy_ns"] > 0 and got["ended_ns"] > got["started_ns"], got
            assert (c.copy_to_host() == 2.0).all()
    """, vgpu_mount))


def test_launches_outside_a_profile_are_not_recorded(vgpu_mount):
    ok(client("""
        k = hand_kernel("vector_add")
        a, b, c = (umd.to_device(np.ones(64, np.float32)) for _ in range(3))
        umd.launch_kernel(k, 1, 64, [a, b, c, 64])
        with umd.profile() as prof:
            pass
        umd.launch_kernel(k, 1, 64, [a, b, c, 64])
        assert prof.launches == []
        umd.synchronize()
    """, vgpu_mount))
