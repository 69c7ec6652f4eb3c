"""Every compute fault kind of the issue, with real kernels on the real executor
through the KMD: illegal instruction, out-of-range register, unmapped and read-only
access, misaligned access, trap, endless loop. Each one fails the fence with an
errno, logs `... GPU fault ... GPU crash dump triggered`, marks the context guilty
and leaves a dump with the wave state and the kernel around the PC."""
import errno

import pytest

from vgpu import asm, uapi
from vgpu import pm4 as P
from vgpu.pm4 import Pm4Ib

from .test_devcoredump import LINE, VA_CODE, VA_DATA, Client, c  # noqa: F401  (fixture)

HEAD = ".kernel k\n"
KERNELS = {
    # name: (assembly, user data, registers declared (vgprs, sgprs) or None, errno, dump text)
    "illegal_instruction": (".inst 0x00000000000000ff\ns_endpgm\n", [0, 0], None, errno.EINVAL,
                            "illegal_instruction"),
    "bad_register": ("v_mov_b32 v40, 1\ns_endpgm\n", [0, 0], (4, 24), errno.EINVAL, "bad_register"),
    "unmapped": ("v_lshl_b32 v3, v0, 2\nglobal_load_dword v4, v3, s[0:1]\ns_endpgm\n",
                 [0x7000000, 0], None, errno.EFAULT, "unmapped"),
    "read_only": ("v_lshl_b32 v3, v0, 2\nglobal_store_dword v3, v0, s[0:1]\ns_endpgm\n",
                  [VA_CODE, 0], None, errno.EFAULT, "permission"),
    "misaligned": ("v_lshl_b32 v3, v0, 2\nglobal_load_dword v4, v3, s[0:1], 2\ns_endpgm\n",
                   [VA_DATA, 0], None, errno.EFAULT, "misaligned"),
    "trap": ("s_trap 7\ns_endpgm\n", [0, 0], None, errno.EINVAL, "trap"),
}


def dispatch(c, source: str, user_data, regs=None):
    obj = asm.assemble(HEAD + source, "k.s")
    c.f.bos[c.code].write(0, obj.code)
    vgprs, sgprs = regs or (obj.vgprs, obj.sgprs)
    ib = (Pm4Ib().set_program(VA_CODE, P.rsrc1(vgprs, sgprs), P.rsrc2(2))
          .set_num_threads(32).set_user_data(user_data).dispatch_direct(1).release_mem(VA_DATA + 256, 1))
    return c.submit(ib)


@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_fault(dev, c, kind):
    source, user_data, regs, err, reason = KERNELS[kind]
    assert c.wait(dispatch(c, source, user_data, regs)) == err
    text = dev.kmsg.text()
    m = LINE.search(text)
    assert m, text
    dump = dev.devcoredumps()[int(m.group(1))]
    assert f"reason: {reason}" in dump, dump
    assert "=== waves ===" in dump and "PC: 0x" in dump and "EXEC: 0x" in dump
    assert "=== kernel ===" in dump and ">>> " in dump.split("=== kernel ===")[1]
    assert c.f.contexts[c.ctx].guilty
    assert c.f.bos[c.data].read(256, 4) == bytes(4)  # the fence after the dispatch never ran


def test_endless_loop_is_caught_by_the_timeout(dev, c):
    assert c.wait(dispatch(c, "spin:\ns_branch spin\n", [0, 0])) == errno.ETIME
    text = dev.kmsg.text()
    assert "ring comp_1.0.0 timeout" in text and "GPU reset succeeded" in text
    dump = dev.devcoredumps()[int(LINE.search(text).group(1))]
    assert "status: aborted" in dump and "s_branch" in dump
    assert c.f.contexts[c.ctx].guilty


def test_a_good_kernel_still_runs_after_a_fault(dev, c, root_client):
    bad = c
    assert bad.wait(dispatch(bad, "s_trap 1\ns_endpgm\n", [0, 0])) == errno.EINVAL
    good = Client(dev, root_client)
    src = "v_lshl_b32 v3, v0, 2\nglobal_store_dword v3, v0, s[0:1]\ns_endpgm\n"
    assert good.wait(dispatch(good, src, [VA_DATA, 0])) == 0
    assert good.f.bos[good.data].read(0, 8) == bytes([0, 0, 0, 0, 1, 0, 0, 0])
    assert not good.f.contexts[good.ctx].guilty
