"""vgpu.isa: the tables are consistent with docs/isa.md and decode/encode agree."""
import re
from pathlib import Path

import pytest

from vgpu import isa as I

DOC = (Path(__file__).resolve().parents[2] / "docs" / "isa.md").read_text()


def test_opcode_table_is_consistent():
    assert I.BY_CODE.get(0) is None                     # zeroed memory is illegal
    for info in I.OPCODES:
        assert 0 < info.code < 256
        assert getattr(I, "OP_" + info.name.upper()) == info.code
        kinds = [k for _, k in info.operands]
        if info.fmt == I.FMT_MEM:
            assert kinds[-1] in (I.K_OFFSET, I.K_OFFSET2)
        if info.fmt == I.FMT_SOPP:
            assert all(f == I.FIELD_IMM for f, _ in info.operands)


def test_every_opcode_is_documented_with_its_number():
    for info in I.OPCODES:
        assert info.name in DOC or re.sub(r"_(eq|ne|lt|le|gt|ge)_", "_{eq,ne,lt,le,gt,ge}_",
                                          info.name) in DOC, info.name
    rows = dict(re.findall(r"^\| (0x[0-9A-F]{2}) \| (\w+) \|", DOC, re.M))
    for code, name in rows.items():
        assert I.BY_NAME[name].code == int(code, 16), name


@pytest.mark.parametrize("info", I.OPCODES, ids=lambda o: o.name)
def test_encode_decode(info):
    word = I.encode(info.fmt, info.code, 1, 2, 3, 4, 5 if info.fmt != I.FMT_VOP3 else 0)
    inst = I.decode(word)
    assert inst.op == info.code
    if info.fmt == I.FMT_SOPP:
        assert (inst.dst, inst.src0, inst.src1, inst.imm) == (0, 0, 0, 5)
    else:
        assert (inst.dst, inst.src0, inst.src1) == (1, 2, 3)
    if info.fmt in (I.FMT_VOP3, I.FMT_MEM):
        assert inst.src2 == 4
    assert I.decode(I.encode(I.FMT_MEM, 0xD0, imm=-1)).imm == -1


def test_limits_and_conventions():
    assert (I.WAVE_SIZE, I.MAX_SGPRS, I.MAX_VGPRS, I.INST_BYTES) == (32, 104, 128, 8)
    assert I.MIN_SGPRS == 19 and I.MIN_VGPRS == 3 and I.SGPR_KERNARG == 0
    assert I.OPR_VGPR == 128 and I.OPR_LIT == 127 and I.OPR_OFF == 126
    assert [I.opr_name(c) for c in (0, 103, 104, 105, 106, 126, 127, 128, 255)] == \
        ["s0", "s103", "vcc", "exec", "scc", "off", "lit", "v0", "v127"]


def test_check_fields_rejects_bad_kinds_and_dirty_fields():
    read2 = I.BY_NAME["ds_read2_b32"]      # offset2: offset0 | offset1 << 8, no more
    assert I.check_fields(read2, I.decode(I.encode(I.FMT_MEM, read2.code, 130, 131,
                                                   imm=0xFFFF))) is None
    assert I.offset2_split(0xFF10) == (0x10, 0xFF)
    for imm in (0x10000, -1):
        assert I.check_fields(read2, I.decode(I.encode(I.FMT_MEM, read2.code, 130, 131,
                                                       imm=imm)))
    mov = I.BY_NAME["s_mov_b32"]
    assert I.check_fields(mov, I.decode(I.encode(I.FMT_ALU, mov.code, 5, 6))) is None
    assert I.check_fields(mov, I.decode(I.encode(I.FMT_ALU, mov.code, 5, 130)))   # vgpr src
    assert I.check_fields(mov, I.decode(I.encode(I.FMT_ALU, mov.code, 106, 6)))   # scc dst
    assert I.check_fields(mov, I.decode(I.encode(I.FMT_ALU, mov.code, 5, 6, 7)))  # src1 used
    assert I.check_fields(mov, I.decode(I.encode(I.FMT_ALU, mov.code, 5, 6, imm=1)))
    assert I.check_fields(mov, I.decode(I.encode(I.FMT_ALU, mov.code, 5, 110)))   # reserved
    fma = I.BY_NAME["v_fma_f32"]
    assert I.check_fields(fma, I.decode(I.encode(I.FMT_VOP3, fma.code, 128, I.OPR_LIT, 129,
                                                 130)))
    assert I.check_fields(fma, I.decode(I.encode(I.FMT_VOP3, fma.code, 128, 129, 129, 130)
                                        | 1 << 50))
    load = I.BY_NAME["global_load_dword"]
    pair = I.decode(I.encode(I.FMT_MEM, load.code, 129, 130, I.OPR_OFF))
    assert I.check_fields(load, pair) is None
    assert I.registers(load, pair) == [(True, 1, 1), (True, 2, 2)]


def test_vco_header_layout():
    h = I.VcoHeader(24, 8, 256, 16, 64, 80, 144, 30, 20, block=(64, 1, 1))
    raw = h.pack()
    assert len(raw) == 64 and raw[:4] == b"VCO1"
    assert I.VcoHeader.unpack(raw) == h
    with pytest.raises(ValueError):
        I.VcoHeader.unpack(b"XXXX" + raw[4:])
