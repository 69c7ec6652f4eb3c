"""SDMA IB disassembler for crash dumps and tracing (pure Python)."""
from __future__ import annotations

from kmd.hw import sdma as S

_FUNCS = ("always", "<", "<=", "==", "!=", ">=", ">", "reserved")


def _addr(dws, i: int) -> str:
    return f"{dws[i] | dws[i + 1] << 32:#x}"


def disasm_sdma(dwords) -> list[str]:
    """One line per packet: dword offset, packet name, decoded fields.

    Stops at the first packet that is unknown or runs past the end (it is shown
    with its raw dwords), as the engine would.
    """
    dws = [int(d) & 0xFFFFFFFF for d in dwords]
    lines: list[str] = []
    pos = 0
    while pos < len(dws):
        hdr = dws[pos]
        op, sub = hdr & 0xFF, hdr >> 8 & 0xFF
        p = pos
        try:
            length = S.packet_length(dws, pos)
        except S.IllegalPacket as bad:
            raw = " ".join(f"{d:08x}" for d in dws[pos:pos + 8])
            lines.append(f"{pos:04x}: <{bad}> op={op} sub_op={sub} [{raw}]")
            break
        if op == S.SDMA_OP_NOP:
            text = f"NOP count={length - 1}"
        elif op == S.SDMA_OP_COPY:
            text = (f"COPY_LINEAR bytes={(dws[p + 1] & S.SDMA_COPY_COUNT_MASK) + 1} "
                    f"src={_addr(dws, p + 3)} dst={_addr(dws, p + 5)} param={dws[p + 2]:#x}")
        elif op == S.SDMA_OP_WRITE:
            data = " ".join(f"{d:#x}" for d in dws[p + 4:p + min(length, 8)])
            more = " ..." if length > 8 else ""
            text = f"WRITE_LINEAR dst={_addr(dws, p + 1)} dwords={length - 4} data=[{data}{more}]"
        elif op == S.SDMA_OP_FENCE:
            text = f"FENCE addr={_addr(dws, p + 1)} data={dws[p + 3]:#x}"
        elif op == S.SDMA_OP_TRAP:
            text = f"TRAP int_context={dws[p + 1] & S.SDMA_TRAP_INT_CONTEXT_MASK:#x}"
        elif op == S.SDMA_OP_POLL_REGMEM:
            kind = "mem" if hdr >> 31 else "reg"
            text = (f"POLL_REGMEM {kind} addr={_addr(dws, p + 1)} (value & {dws[p + 4]:#x}) "
                    f"{_FUNCS[hdr >> 28 & 7]} {dws[p + 3]:#x} interval={dws[p + 5] & 0xFFFF} "
                    f"retry={dws[p + 5] >> 16 & 0xFFF:#x}")
        elif op == S.SDMA_OP_CONST_FILL:
            size = "byte" if hdr >> 30 == S.SDMA_FILLSIZE_BYTE else "dword"
            text = (f"CONSTANT_FILL dst={_addr(dws, p + 1)} {size} value={dws[p + 3]:#x} "
                    f"bytes={(dws[p + 4] & S.SDMA_CONST_FILL_COUNT_MASK) + 1}")
        else:
            text = f"TIMESTAMP GET_GLOBAL addr={_addr(dws, p + 1)}"
        lines.append(f"{pos:04x}: {text}")
        pos += length
    return lines
