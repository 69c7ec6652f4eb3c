"""vISA assembler and disassembler (docs/isa.md 9), and `vgpu asm` / `vgpu disasm`.

    obj = assemble(text, "k.s")        # -> CodeObject (code bytes, counts, metadata)
    data = obj.pack()                  # the .vco file
    text = disassemble_vco(data)       # reassembles to the same bytes
    disassemble(code) / disasm_word(word)   # raw instruction streams, crash dumps
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import struct

from vgpu import isa as I

# An 8/16-bit or bool argument takes a 32-bit slot holding its value widened (umd's
# launch wraps and extends it).
_ARG_KINDS = {"ptr": 8, "u32": 4, "i32": 4, "f32": 4, "u64": 8, "i64": 8, "f64": 8,
              "u8": 4, "i8": 4, "u16": 4, "i16": 4, "b1": 4}
_COMMENT = re.compile(r";|#|//")
_LABEL = re.compile(r"\s*([A-Za-z_.$][\w.$]*)\s*:(?!\d)")
_IDENT = re.compile(r"[A-Za-z_.$][\w.$]*$")
_REG = re.compile(r"([sv])(\d+)$")
_RANGE = re.compile(r"([sv])\[\s*(\d+)\s*:\s*(\d+)\s*\]$")
_OFFSET2_START = re.compile(r"\s+(?=offset)", re.I)
_SPECIAL = {"vcc": I.OPR_VCC, "exec": I.OPR_EXEC, "scc": I.OPR_SCC, "off": I.OPR_OFF}


class AsmError(ValueError):
    """Bad assembly: str() is `file:line:col: error: message` (1-based line and column)."""

    def __init__(self, msg: str, line: int, col: int, filename: str = "<asm>") -> None:
        super().__init__(f"{filename}:{line}:{col}: error: {msg}")
        self.msg, self.line, self.col, self.filename = msg, line, col, filename


@dataclasses.dataclass
class KernelArg:
    name: str
    kind: str
    offset: int
    size: int


@dataclasses.dataclass
class CodeObject:
    """An assembled kernel: the code and what the loader needs to dispatch it."""

    code: bytes
    name: str = "kernel"
    sgprs: int = I.MIN_SGPRS
    vgprs: int = I.MIN_VGPRS
    lds_bytes: int = 0
    entry: int = 0
    args: list[KernelArg] = dataclasses.field(default_factory=list)
    block: tuple[int, int, int] = (0, 0, 0)
    labels: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def kernarg_size(self) -> int:
        return max((a.offset + a.size for a in self.args), default=0)

    def metadata(self) -> dict:
        return {"name": self.name, "kernarg_size": self.kernarg_size,
                "args": [dataclasses.asdict(a) for a in self.args], "block": list(self.block)}

    def pack(self) -> bytes:
        meta = json.dumps(self.metadata(), sort_keys=True, separators=(",", ":")).encode()
        code_off = I.VCO_HEADER_SIZE
        header = I.VcoHeader(self.sgprs, self.vgprs, self.lds_bytes, self.entry, code_off,
                             len(self.code), code_off + len(self.code), len(meta),
                             self.kernarg_size, block=self.block)
        return header.pack() + self.code + meta

    @classmethod
    def unpack(cls, data: bytes) -> CodeObject:
        h = I.VcoHeader.unpack(data)
        if h.code_offset + h.code_size > len(data) or h.meta_offset + h.meta_size > len(data):
            raise ValueError("code object truncated")
        if h.code_size % I.INST_BYTES or h.code_offset % I.INST_BYTES:
            raise ValueError("code object: code is not whole 8-byte instructions")
        meta = json.loads(data[h.meta_offset:h.meta_offset + h.meta_size] or b"{}")
        args = [KernelArg(a["name"], a["kind"], a["offset"], a["size"])
                for a in meta.get("args", [])]
        return cls(bytes(data[h.code_offset:h.code_offset + h.code_size]),
                   meta.get("name", "kernel"), h.sgprs, h.vgprs, h.lds_bytes, h.entry, args,
                   tuple(h.block))


# -- assembling ------------------------------------------------------------------------
@dataclasses.dataclass
class _Line:
    no: int
    text: str           # the line without its comment
    start: int          # column (0-based) where the statement starts
    mnemonic: str


def _split_operands(text: str, start: int) -> list[tuple[str, int]]:
    """Comma-separated operands with their 0-based columns (brackets never hold commas)."""
    if not text[start:].strip():
        return []
    out, pos = [], start
    for part in text[start:].split(","):
        stripped = part.strip()
        col = pos + (len(part) - len(part.lstrip()))
        out.append((stripped, col))
        pos += len(part) + 1
    return out


def _split_offset2(ops: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """GCN's `ds_read2_b32 v[4:5], v3 offset0:16 offset1:32`: the modifiers after the
    address become one more operand ('' when there are none); a comma before them is
    accepted too."""
    if not ops or ops[-1][0].lower().startswith("offset"):
        return ops
    tok, col = ops[-1]
    m = _OFFSET2_START.search(tok)
    head, mods = (tok[:m.start()], tok[m.end():]) if m else (tok, "")
    return ops[:-1] + [(head, col), (mods, col + len(tok) - len(mods))]


def _parse_offset2(text: str) -> int:
    """The MEM offset field of `offset0:N offset1:M` (either may be left out: 0)."""
    values: dict[str, int] = {}
    for mod in text.lower().split():
        name, sep, value = mod.partition(":")
        if name not in ("offset0", "offset1") or not sep or name in values:
            raise ValueError(f"bad modifier {mod!r} (expected offset0:N and/or offset1:N)")
        v = _parse_int(value)
        if v is None or not 0 <= v <= I.OFFSET2_MAX:
            raise ValueError(f"{name} {value!r} must be an integer in 0..{I.OFFSET2_MAX} "
                             "(dwords)")
        values[name] = v
    return values.get("offset0", 0) | values.get("offset1", 0) << 8


def _parse_int(tok: str) -> int | None:
    try:
        return int(tok, 0)
    except ValueError:
        return None


def _parse_literal(tok: str) -> int | None:
    """32-bit bits of an integer or float literal, None when `tok` is not a number."""
    value = _parse_int(tok)
    if value is not None:
        if not -(1 << 31) <= value < 1 << 32:
            raise ValueError(f"literal {tok} does not fit in 32 bits")
        return value & 0xFFFFFFFF
    low = tok.lower().lstrip("+-")
    if low in ("inf", "nan") or re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)(e[+-]?\d+)?", tok.lower()):
        x = float(tok)
        if math.isnan(x):
            return I.CANONICAL_NAN
        try:
            return struct.unpack("<I", struct.pack("<f", x))[0]
        except OverflowError:
            raise ValueError(f"float literal {tok} is out of binary32 range") from None
    return None


class _Assembler:
    def __init__(self, text: str, filename: str) -> None:
        self.filename = filename
        self.lines = text.splitlines()
        self.obj = CodeObject(b"")
        self.max_s = -1
        self.max_v = -1
        self.explicit: set[str] = set()
        self.at = (0, 0)                        # the statement being encoded: (line, column)
        self.highest: dict[str, tuple[str, int, int]] = {}   # file -> (its top register's token, line, col)

    def err(self, msg, line, col):
        return AsmError(msg, line, col + 1, self.filename)

    def run(self) -> CodeObject:
        stmts, labels, entry = [], {}, None
        pc = 0
        for no, raw in enumerate(self.lines, 1):
            m = _COMMENT.search(raw)
            text = raw[:m.start()] if m else raw
            pos = 0
            while True:
                lm = _LABEL.match(text, pos)
                if not lm:
                    break
                name = lm.group(1)
                if name in labels:
                    raise self.err(f"label {name!r} defined twice", no, lm.start(1))
                labels[name] = pc
                pos = lm.end()
            rest = text[pos:]
            if not rest.strip():
                continue
            start = pos + len(rest) - len(rest.lstrip())
            word_end = start + len(text[start:].split(None, 1)[0])
            mnemonic = text[start:word_end]
            if mnemonic.startswith(".") and mnemonic != ".inst":
                entry = self.directive(no, text, start, word_end, mnemonic) or entry
                continue
            stmts.append((pc, _Line(no, text, word_end, mnemonic.lower()), start))
            pc += I.INST_BYTES
        self.labels = labels
        code = bytearray()
        for pc, line, col in stmts:
            self.at = (line.no, col)
            code += struct.pack("<Q", self.encode(pc, line, col))
        obj = self.obj
        obj.code, obj.labels = bytes(code), labels
        if entry is not None:
            name, no, col = entry
            if name not in labels:
                raise self.err(f".entry: unknown label {name!r}", no, col)
            obj.entry = labels[name]
        if "sgprs" not in self.explicit:
            obj.sgprs = max(I.MIN_SGPRS, self.max_s + 1)
        if "vgprs" not in self.explicit:
            obj.vgprs = max(I.MIN_VGPRS, self.max_v + 1)
        # A register past the count declared would be another wave's (the CU gives a
        # wave only what the code object asks for).
        for file, used, declared in (("s", self.max_s, obj.sgprs), ("v", self.max_v, obj.vgprs)):
            if used >= declared:
                tok, no, col = self.highest[file]
                raise self.err(f"{tok} is past the {declared} {file.upper()}GPRs that .{file}gprs "
                               f"declares ({file}0..{file}{declared - 1}): declare .{file}gprs "
                               f"{used + 1} or use a lower register", no, col)
        return obj

    # -- directives ------------------------------------------------------------------
    def directive(self, no, text, start, end, name):
        args = text[end:].split()
        acol = end + len(text[end:]) - len(text[end:].lstrip())

        def number(k, lo, hi):
            if len(args) <= k:
                raise self.err(f"{name} needs {k + 1} argument(s)", no, acol)
            v = _parse_int(args[k])
            if v is None or not lo <= v <= hi:
                raise self.err(f"{name}: {args[k]!r} is not an integer in {lo}..{hi}", no, acol)
            return v

        obj = self.obj
        if name == ".kernel":
            if len(args) != 1 or not _IDENT.match(args[0]):
                raise self.err(".kernel needs one name", no, acol)
            obj.name = args[0]
        elif name == ".sgprs":
            obj.sgprs = number(0, I.MIN_SGPRS, I.MAX_SGPRS)
            self.explicit.add("sgprs")
        elif name == ".vgprs":
            obj.vgprs = number(0, I.MIN_VGPRS, I.MAX_VGPRS)
            self.explicit.add("vgprs")
        elif name == ".lds":
            obj.lds_bytes = number(0, 0, I.MAX_LDS_BYTES)
        elif name == ".block":
            obj.block = tuple(number(k, 0, I.MAX_BLOCK_THREADS) for k in range(3))
        elif name == ".entry":
            if len(args) != 1:
                raise self.err(".entry needs one label", no, acol)
            return (args[0], no, acol)
        elif name == ".arg":
            if len(args) != 2 or args[1] not in _ARG_KINDS or not _IDENT.match(args[0]):
                raise self.err(f".arg needs NAME KIND (KIND one of {', '.join(_ARG_KINDS)})",
                               no, acol)
            size = _ARG_KINDS[args[1]]
            offset = -(-obj.kernarg_size // size) * size
            obj.args.append(KernelArg(args[0], args[1], offset, size))
        elif name == ".inst":
            raise self.err(".inst is only allowed among instructions", no, start)
        else:
            raise self.err(f"unknown directive {name}", no, start)
        return None

    # -- instructions -------------------------------------------------------------------
    def encode(self, pc: int, line: _Line, col: int) -> int:
        no = line.no
        if line.mnemonic == ".inst":
            ops = _split_operands(line.text, line.start)
            v = _parse_int(ops[0][0]) if len(ops) == 1 else None
            if v is None or not 0 <= v < 1 << 64:
                raise self.err(".inst needs one 64-bit integer", no, col)
            return v
        info = I.BY_NAME.get(line.mnemonic)
        if info is None:
            raise self.err(f"unknown instruction {line.mnemonic!r}", no, col)
        ops = _split_operands(line.text, line.start)
        expected = list(info.operands)
        # MEM offsets are optional.
        if expected and expected[-1][1] == I.K_OFFSET and len(ops) == len(expected) - 1:
            ops.append(("0", len(line.text)))
        if expected and expected[-1][1] == I.K_OFFSET2:
            ops = _split_offset2(ops)
        if len(ops) != len(expected):
            raise self.err(f"{info.name} takes {len(expected)} operand(s) "
                           f"({', '.join(k for _, k in expected) or 'none'}), got {len(ops)}",
                           no, col)
        fields = {"dst": 0, "src0": 0, "src1": 0, "src2": 0, "imm": 0}
        literal = None
        # base first: it decides what a global address is.
        order = sorted(range(len(ops)), key=lambda k: expected[k][1] != I.K_SBASE)
        for k in order:
            field, kind = expected[k]
            tok, tcol = ops[k]
            if not tok and kind != I.K_OFFSET2:
                raise self.err(f"missing operand {k + 1}", no, tcol)
            if kind == I.K_GADDR:
                kind = I.K_VREG2 if fields["src1"] == I.OPR_OFF else I.K_VREG
            try:
                if kind in (I.K_OFFSET, I.K_OFFSET2, I.K_IMM, I.K_BRANCH):
                    fields["imm"] = self.immediate(kind, tok, pc)
                    continue
                code, lit = self.operand(kind, tok, info)
            except ValueError as e:
                raise self.err(str(e), no, tcol) from None
            if lit is not None:
                if literal is not None and lit != literal:
                    raise self.err("only one literal value per instruction", no, tcol)
                literal = lit
                fields["imm"] = lit
            fields[{"addr": "src0", "base": "src1", "data": "src2"}.get(field, field)] = code
        return I.encode(info.fmt, info.code, fields["dst"], fields["src0"], fields["src1"],
                        fields["src2"], fields["imm"])

    def immediate(self, kind: str, tok: str, pc: int) -> int:
        if kind == I.K_BRANCH:
            if tok in self.labels:
                return (self.labels[tok] - pc - I.INST_BYTES) & 0xFFFFFFFF
            v = _parse_int(tok)
            if v is None:
                raise ValueError(f"unknown label {tok!r}")
            if not -(1 << 31) <= v < 1 << 31:
                raise ValueError(f"branch offset {tok} does not fit in 32 bits")
            return v & 0xFFFFFFFF
        if kind == I.K_OFFSET2:
            return _parse_offset2(tok)
        v = _parse_int(tok)
        if kind == I.K_OFFSET:
            if v is None or not I.OFFSET_MIN <= v <= I.OFFSET_MAX:
                raise ValueError(f"offset {tok!r} must be an integer in "
                                 f"{I.OFFSET_MIN}..{I.OFFSET_MAX}")
            return v
        if v is None or not 0 <= v < 1 << 32:
            raise ValueError(f"immediate {tok!r} must be an integer in 0..0xffffffff")
        return v

    def operand(self, kind: str, tok: str, info: I.OpInfo) -> tuple[int, int | None]:
        low = tok.lower()
        width = I.KIND_WIDTH.get(kind, 1)
        if kind in (I.K_SBASE, I.K_VDST2_OFF) and low == "off":
            return I.OPR_OFF, None
        if low in _SPECIAL:
            code = _SPECIAL[low]
            if width != 1 or not I._KIND_OK[kind](code):
                raise ValueError(f"{low} is not allowed here (expected {kind})")
            return code, None
        m = _REG.match(low)
        r = _RANGE.match(low)
        if m or r:
            file = (m or r).group(1)
            lo = int((m or r).group(2))
            hi = int(r.group(3)) if r else lo
            limit = I.MAX_SGPRS if file == "s" else I.MAX_VGPRS
            if hi < lo or hi >= limit:
                raise ValueError(f"{tok}: {'S' if file == 's' else 'V'}GPR index out of range "
                                 f"(0..{limit - 1})")
            if hi - lo + 1 != width:
                raise ValueError(f"{tok}: expected {width} register(s) for {kind}")
            code = lo if file == "s" else I.OPR_VGPR + lo
            if not I._KIND_OK[kind](code):
                raise ValueError(f"{tok}: a {'scalar' if file == 's' else 'vector'} register "
                                 f"is not allowed here (expected {kind})")
            if hi > (self.max_s if file == "s" else self.max_v):
                self.highest[file] = (tok, *self.at)
            if file == "s":
                self.max_s = max(self.max_s, hi)
            else:
                self.max_v = max(self.max_v, hi)
            return code, None
        lit = _parse_literal(tok)
        if lit is None:
            raise ValueError(f"bad operand {tok!r} (expected {kind})")
        if not I._KIND_OK[kind](I.OPR_LIT) or info.fmt != I.FMT_ALU:
            raise ValueError(f"a literal is not allowed here (expected {kind})")
        return I.OPR_LIT, lit


def assemble(text: str, filename: str = "<asm>") -> CodeObject:
    """Assemble a kernel; raises AsmError naming the line and column."""
    return _Assembler(text, filename).run()


# -- disassembling -----------------------------------------------------------------------
def _reg(code: int, width: int = 1) -> str:
    if width == 1 or not (code < I.MAX_SGPRS or code >= I.OPR_VGPR):
        return I.opr_name(code)
    file, lo = ("s", code) if code < I.MAX_SGPRS else ("v", code - I.OPR_VGPR)
    return f"{file}[{lo}:{lo + width - 1}]"


def _literal(bits: int, ftype: str) -> str:
    if ftype == "f32":
        x = struct.unpack("<f", struct.pack("<I", bits))[0]
        if math.isfinite(x):
            return repr(x)
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return f"{bits:#010x}"
    signed = bits - (1 << 32) if bits & 0x80000000 else bits
    return str(signed) if -65536 < signed < 65536 else f"{bits:#x}"


def disasm_word(word: int, pc: int | None = None, labels: dict[int, str] | None = None) -> str:
    """One instruction as assembly; an invalid word is `.inst 0x...`."""
    inst = I.decode(word)
    info = I.BY_CODE.get(inst.op)
    if info is None or I.check_fields(info, inst) is not None:
        return f".inst {word:#018x}"
    # A pair that runs off the register file (v[127:128]) decodes (and faults as
    # bad_register) but has no assembly spelling.
    if any(index + width > (I.MAX_VGPRS if vgpr else I.MAX_SGPRS)
           for vgpr, index, width in I.registers(info, inst)):
        return f".inst {word:#018x}"
    fields = I.operand_fields(info, inst)
    parts = []
    for field, kind in info.operands:
        if kind == I.K_OFFSET:
            if inst.imm:
                parts.append(str(inst.imm))
            continue
        if kind == I.K_OFFSET2:     # GCN's spelling: modifiers after the address
            mods = [f"offset{k}:{o}" for k, o in enumerate(I.offset2_split(inst.imm)) if o]
            parts[-1] = " ".join([parts[-1]] + mods)
            continue
        if kind == I.K_IMM:
            parts.append(str(inst.imm))
            continue
        if kind == I.K_BRANCH:
            off = I.sext32(inst.imm)
            target = None if pc is None else pc + I.INST_BYTES + off
            parts.append(labels[target] if labels and target in labels else str(off))
            continue
        attr = {"addr": "src0", "base": "src1", "data": "src2"}.get(field, field)
        code = getattr(inst, attr)
        if code == I.OPR_LIT:
            parts.append(_literal(inst.imm, info.ftype))
        else:
            parts.append(_reg(code, I.KIND_WIDTH.get(fields[attr], 1)))
    return f"{info.name} {', '.join(parts)}".rstrip()


def _words(code: bytes) -> list[int]:
    if len(code) % I.INST_BYTES:
        raise ValueError(f"code size {len(code)} is not a multiple of {I.INST_BYTES}")
    return list(struct.unpack(f"<{len(code) // 8}Q", code))


def _branch_labels(words: list[int], extra: tuple[int, ...] = ()) -> dict[int, str]:
    targets = set(extra)
    for k, word in enumerate(words):
        info = I.BY_CODE.get(word & 0xFF)
        inst = I.decode(word)
        if info and info.operands and info.operands[0][1] == I.K_BRANCH and \
                I.check_fields(info, inst) is None:
            target = k * 8 + 8 + I.sext32(inst.imm)
            if 0 <= target <= len(words) * 8 and target % 8 == 0:
                targets.add(target)
    return {t: f"L{t:04x}" for t in sorted(targets)}


def disassemble(code: bytes, with_pc: bool = False, extra_labels: tuple[int, ...] = ()) -> str:
    """A raw instruction stream as assembly (branch targets get `Lxxxx:` labels).

    `with_pc` prefixes each line with its byte offset as a comment (crash dumps); the
    text reassembles to the same bytes either way.
    """
    words = _words(code)
    labels = _branch_labels(words, extra_labels)
    out = []
    for k, word in enumerate(words):
        pc = k * 8
        if pc in labels:
            out.append(f"{labels[pc]}:")
        text = disasm_word(word, pc, labels)
        out.append(f"    {text:<48} ; {pc:#06x}: {word:016x}" if with_pc else f"    {text}")
    end = len(words) * 8
    if end in labels:
        out.append(f"{labels[end]}:")
    return "\n".join(out) + "\n"


def disassemble_vco(data: bytes) -> str:
    """A code object as assembly with its directives (reassembles to the same bytes)."""
    obj = CodeObject.unpack(data)
    lines = [f".kernel {obj.name}"]
    lines += [f".arg {a.name} {a.kind}" for a in obj.args]
    lines += [f".sgprs {obj.sgprs}", f".vgprs {obj.vgprs}", f".lds {obj.lds_bytes}"]
    if any(obj.block):
        lines.append(".block {} {} {}".format(*obj.block))
    extra = (obj.entry,) if obj.entry else ()
    if obj.entry:
        lines.append(f".entry L{obj.entry:04x}")
    return "\n".join(lines) + "\n" + disassemble(obj.code, extra_labels=extra)
