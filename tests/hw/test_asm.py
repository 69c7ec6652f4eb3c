"""vgpu.asm: every instruction round-trips, errors name line and column, the CLI."""
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from vgpu import isa as I
from vgpu.asm import AsmError, CodeObject, assemble, disasm_word, disassemble, disassemble_vco

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "kernels"


def operand_text(kind: str, r: random.Random, base_off: bool) -> str:
    s, v = r.randrange(0, 100), r.randrange(0, 126)
    return {
        I.K_SDST: r.choice([f"s{s}", "vcc", "exec"]),
        I.K_SDST2: f"s[{s}:{s + 1}]", I.K_SDST4: f"s[{s}:{s + 3}]",
        I.K_SDST8: f"s[{min(s, 96)}:{min(s, 96) + 7}]", I.K_SDST16: f"s[{min(s, 88)}:{min(s, 88) + 15}]",
        I.K_SSRC: r.choice([f"s{s}", "vcc", "exec", "scc", "-7"]),
        I.K_SSRC2: f"s[{s}:{s + 1}]", I.K_SBASE2: f"s[{s}:{s + 1}]",
        I.K_SMASK: r.choice([f"s{s}", "vcc", "exec"]),
        I.K_VDST: f"v{v}", I.K_VREG: f"v{v}", I.K_VREG2: f"v[{v}:{v + 1}]",
        I.K_VREG4: f"v[{min(v, 124)}:{min(v, 124) + 3}]",
        I.K_VDST_OFF: r.choice([f"v{v}", "off"]),
        I.K_VDST2_OFF: r.choice([f"v[{v}:{v + 1}]", "off"]),
        I.K_VSRC2: r.choice([f"v[{v}:{v + 1}]", f"s[{s}:{s + 1}]"]),
        I.K_VSRC: r.choice([f"v{v}", f"s{s}", "vcc", "exec", "scc", "-7"]),
        I.K_GADDR: f"v[{v}:{v + 1}]" if base_off else f"v{v}",
        I.K_SBASE: "off" if base_off else f"s[{s}:{s + 1}]",
        I.K_OFFSET: str(r.choice([0, 4, -8, I.OFFSET_MAX, I.OFFSET_MIN])),
        I.K_OFFSET2: r.choice(["offset0:3 offset1:255", "offset1:7", "OFFSET0:0x10"]),
        I.K_IMM: str(r.randrange(1 << 32)),
        I.K_BRANCH: "there",
    }[kind]


@pytest.mark.parametrize("info", I.OPCODES, ids=lambda o: o.name)
def test_every_instruction_round_trips(info):
    r = random.Random(info.code)
    for k in range(8):
        base_off = k % 2 == 0
        ops = [operand_text(kind, r, base_off) for _, kind in info.operands]
        if info.fmt == I.FMT_VOP3:
            ops = [o if o != "-7" else "v3" for o in ops]
        text = f"there:\n    {info.name} {', '.join(ops)}\n    s_endpgm\n"
        obj = assemble(text)
        word, = struct.unpack_from("<Q", obj.code)
        assert word & 0xFF == info.code
        assert I.check_fields(info, I.decode(word)) is None
        again = assemble(disassemble(obj.code))
        assert again.code == obj.code, disassemble(obj.code)


def test_random_words_round_trip_through_disasm():
    r = random.Random(7)
    words = [r.getrandbits(64) for _ in range(3000)]
    # and words with a valid opcode byte, so most decode as instructions
    words += [(r.getrandbits(56) << 8) | r.choice(I.OPCODES).code for _ in range(3000)]
    code = struct.pack(f"<{len(words)}Q", *words)
    assert assemble(disassemble(code)).code == code


def test_field_layout_bit_by_bit():
    obj = assemble("v_add_f32 v3, s5, 1.0\n global_load_dword v1, v2, s[4:5], -8\n"
                   "v_fma_f32 v0, v1, v2, s3\n s_branch -16")
    w = struct.unpack("<4Q", obj.code)
    assert w[0] == 0x98 | (128 + 3) << 8 | 5 << 16 | I.OPR_LIT << 24 | 0x3F800000 << 32
    assert w[1] == 0xD0 | (128 + 1) << 8 | (128 + 2) << 16 | 4 << 24 | 0 << 32 | \
        ((-8) & 0xFFFFFF) << 40
    assert w[2] == 0xA0 | 128 << 8 | 129 << 16 | 130 << 24 | 3 << 32
    assert w[3] == 0x03 | 0xFFFFFFF0 << 32


def test_ds_read2_b32_spelling():
    # GCN's: the dword offsets as modifiers after the address (a comma before them is
    # accepted); offset0 in bits [47:40], offset1 in [55:48]; zero ones are not printed.
    for text in ("ds_read2_b32 v[4:5], v3 offset0:16 offset1:32",
                 "ds_read2_b32 v[4:5], v3, offset1:32 offset0:16"):
        word, = struct.unpack("<Q", assemble(text).code)
        assert word == 0x56 | (128 + 4) << 8 | (128 + 3) << 16 | (16 | 32 << 8) << 40
        assert disasm_word(word) == "ds_read2_b32 v[4:5], v3 offset0:16 offset1:32"
    word, = struct.unpack("<Q", assemble("ds_read2_b32 v[4:5], v3 offset1:255").code)
    assert word >> 40 == 255 << 8 and disasm_word(word) == "ds_read2_b32 v[4:5], v3 offset1:255"
    word, = struct.unpack("<Q", assemble("ds_read2_b32 v[4:5], v3").code)
    assert word >> 40 == 0 and disasm_word(word) == "ds_read2_b32 v[4:5], v3"
    assert disasm_word(word | 1 << 56).startswith(".inst ")     # bits [63:56] are not 0


def test_literals_floats_and_labels():
    obj = assemble("top: v_mov_b32 v1, -inf\n v_mov_b32 v2, 0.5 ; c\n"
                   "  s_cbranch_scc1 top // back\n")
    w = struct.unpack("<3Q", obj.code)
    assert w[0] >> 32 == 0xFF800000 and w[1] >> 32 == 0x3F000000
    assert I.sext32(w[2] >> 32) == -24
    assert obj.labels == {"top": 0}
    assert disasm_word(w[1]) == "v_mov_b32 v2, 0x3f000000"       # b32: as an integer
    assert disasm_word(assemble("v_add_f32 v1, v1, 0.5").code and
                       struct.unpack("<Q", assemble("v_add_f32 v1, v1, 0.5").code)[0]) == \
        "v_add_f32 v1, v1, 0.5"


@pytest.mark.parametrize("text,line,col,msg", [
    ("s_nop\n  v_bogus v1, v2", 2, 3, "unknown instruction 'v_bogus'"),
    ("v_add_u32 v1, v2", 1, 1, "takes 3 operand(s)"),
    ("v_add_u32 v1, v2, v200", 1, 19, "VGPR index out of range"),
    ("s_mov_b32 s1, v2", 1, 15, "vector register is not allowed"),
    ("v_add_u32 v1, 1, 2", 1, 18, "only one literal value"),
    ("v_fma_f32 v1, v2, 1.0, v3", 1, 19, "a literal is not allowed here"),
    ("s_branch nowhere", 1, 10, "unknown label 'nowhere'"),
    ("global_load_dword v1, v2, off", 1, 23, "expected 2 register(s)"),
    ("ds_read_b32 v1, v2, 99999999", 1, 21, "offset"),
    ("x:\nx:", 2, 1, "label 'x' defined twice"),
    (".sgprs 200", 1, 8, ".sgprs"),
    (".frobnicate", 1, 1, "unknown directive"),
    ("  v_mov_b32 v1, 1e99", 1, 17, "out of binary32 range"),
    ("v_mov_b32 v1, banana", 1, 15, "bad operand 'banana'"),
    ("s_mov_b32 scc, 1", 1, 11, "scc is not allowed here"),
    ("ds_read2_b32 v[2:3], v1 offset0:256", 1, 25, "offset0 '256' must be an integer in 0..255"),
    ("ds_read2_b32 v[2:3], v1, offset1:1 offset1:2", 1, 26, "bad modifier 'offset1:2'"),
    ("ds_read2_b32 v[2:3], v1 offset:4", 1, 25, "bad modifier 'offset:4'"),
    ("ds_read2_b32 v2, v1", 1, 14, "expected 2 register(s)"),
])
def test_errors_name_line_and_column(text, line, col, msg):
    with pytest.raises(AsmError) as e:
        assemble(text, "k.s")
    assert (e.value.line, e.value.col) == (line, col), str(e.value)
    assert msg in e.value.msg
    assert str(e.value).startswith(f"k.s:{line}:{col}: error: ")


def test_register_counts_and_metadata():
    obj = assemble(".kernel k\n.arg p ptr\n.arg n u32\n.arg q ptr\n.lds 128\n.block 64 1 1\n"
                   "v_mov_b32 v9, s30\n s_endpgm\nend:\n.entry end")
    assert (obj.sgprs, obj.vgprs, obj.lds_bytes, obj.block, obj.entry) == (31, 10, 128,
                                                                            (64, 1, 1), 16)
    assert [(a.name, a.offset, a.size) for a in obj.args] == [("p", 0, 8), ("n", 8, 4),
                                                              ("q", 16, 8)]
    assert obj.kernarg_size == 24
    assert assemble("s_endpgm").sgprs == I.MIN_SGPRS
    back = CodeObject.unpack(obj.pack())
    assert (back.code, back.args, back.block, back.entry, back.sgprs) == \
        (obj.code, obj.args, obj.block, obj.entry, obj.sgprs)


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.s")), ids=lambda p: p.name)
def test_samples_round_trip_as_code_objects(path):
    obj = assemble(path.read_text(), path.name)
    data = obj.pack()
    assert assemble(disassemble_vco(data)).pack() == data


def test_cli_asm_disasm(tmp_path):
    src = tmp_path / "k.s"
    src.write_text(".kernel k\n    v_mov_b32 v1, 2.0\n    s_endpgm\n")
    run = lambda *a: subprocess.run([sys.executable, "-m", "vgpu_tools", *a], capture_output=True,
                                    text=True, cwd=Path(__file__).resolve().parents[2])
    p = run("asm", str(src), "-o", str(tmp_path / "k.vco"))
    assert p.returncode == 0, p.stderr
    p = run("disasm", str(tmp_path / "k.vco"))
    assert p.returncode == 0 and "v_mov_b32 v1, 0x40000000" in p.stdout and ".kernel k" in p.stdout
    (tmp_path / "raw.bin").write_bytes(assemble("s_endpgm").code)
    p = run("disasm", "--raw", "--pc", str(tmp_path / "raw.bin"))
    assert "s_endpgm" in p.stdout and "0x0000" in p.stdout
    src.write_text("    s_mov_b32 s1, v2\n")
    p = run("asm", str(src))
    assert p.returncode == 1 and f"{src}:1:19: error:" in p.stderr
