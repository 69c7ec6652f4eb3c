"""libvgpu.code_object without a device: parsing, argument packing, the PM4 it emits."""
import struct

import pytest

from libvgpu import code_object as CO
from libvgpu.errors import VgpuInvalidArgument
from vgpu import asm
from vgpu import pm4 as P

SRC = """.kernel k
.arg out ptr
.arg n u32
.arg scale f32
.block 64 1 1
start:
    s_endpgm
"""


def test_parse_and_pack_args():
    obj = CO.code_object_parse(asm.assemble(SRC, "k.s").pack())
    assert (obj.name, obj.block, obj.kernarg_size, len(obj.code)) == ("k", (64, 1, 1), 16, 8)
    k = CO.LoadedKernel(obj, None, None, 0x100000)
    assert k.pack_args(out=0x1122334455667788, n=7, scale=1.5) == struct.pack("<QIf", 0x1122334455667788, 7, 1.5)
    with pytest.raises(VgpuInvalidArgument):
        k.pack_args(out=1)
    assert P.decode_rsrc1(k.rsrc1) == (4, 24)   # granules: 3 VGPRs -> 4, 19 SGPRs -> 24


def test_parse_refuses_garbage():
    with pytest.raises(VgpuInvalidArgument):
        CO.code_object_parse(b"not a code object" * 8)


def test_emit_dispatch():
    obj = CO.code_object_parse(asm.assemble(SRC, "k.s").pack())
    k = CO.LoadedKernel(obj, None, None, 0x100000)
    ib = CO.emit_dispatch(P.Pm4Ib(), k, grid=(3,), user_data=CO.kernarg_user_data(0x1_0000_2000))
    text = "\n".join(P.disasm_pm4(ib.dwords))
    assert "COMPUTE_PGM_LO=0x1000 " in text and "COMPUTE_NUM_THREAD_X=0x40" in text
    assert "COMPUTE_USER_DATA_0=0x2000 COMPUTE_USER_DATA_1=0x1" in text
    assert "DISPATCH_DIRECT groups=3x1x1" in text
    assert P.decode_rsrc2(ib.dwords[7]) == (2, 0)
