"""`vgpu asm` and `vgpu disasm`: the command-line front ends of vgpu.asm."""
from __future__ import annotations

import struct
import sys

from vgpu import isa as I
from vgpu.asm import AsmError, assemble, disassemble, disassemble_vco


def cmd_asm(args) -> int:
    try:
        with open(args.input) as f:
            obj = assemble(f.read(), args.input)
    except AsmError as e:
        print(e, file=sys.stderr)
        return 1
    except UnicodeDecodeError:
        print(f"vgpu asm: {args.input} is not a text file; vgpu asm reads vISA source (a .s file, "
              "docs/isa.md)", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"vgpu asm: {args.input}: {e.strerror}", file=sys.stderr)
        return 1
    out = args.output or (args.input.rsplit(".", 1)[0] + ".vco")
    with open(out, "wb") as f:
        f.write(obj.pack())
    return 0


def cmd_disasm(args) -> int:
    try:
        with open(args.file, "rb") as f:
            data = f.read()
        if not args.raw and data[:4] == struct.pack("<I", I.VCO_MAGIC):
            text = disassemble_vco(data)
        elif not args.raw and (_is_text(data) or len(data) % I.INST_BYTES):
            print(f"vgpu disasm: {args.file} is not a code object; assemble it with "
                  f"`vgpu asm {args.file}` (or pass --raw for raw instruction words)", file=sys.stderr)
            return 1
        else:
            text = disassemble(data, with_pc=args.pc)
    except (OSError, ValueError) as e:
        print(f"vgpu disasm: {args.file}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


def _is_text(data: bytes) -> bool:
    """True for a file of printable text (an assembly source, say), never code."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return bool(text) and all(c.isprintable() or c in "\t\r\n" for c in text)


def add_parsers(sub) -> None:
    """The `asm` and `disasm` subcommands of the vgpu console script."""
    a = sub.add_parser("asm", help="assemble vISA into a code object (.vco)")
    a.add_argument("input", metavar="IN.s")
    a.add_argument("-o", "--output", metavar="OUT.vco", help="default: IN with .vco")
    a.set_defaults(func=cmd_asm)
    d = sub.add_parser("disasm", help="disassemble a code object or raw vISA words")
    d.add_argument("file", metavar="FILE")
    d.add_argument("--raw", action="store_true", help="FILE is raw instructions, not a .vco")
    d.add_argument("--pc", action="store_true", help="show offsets and words (raw streams)")
    d.set_defaults(func=cmd_disasm)
