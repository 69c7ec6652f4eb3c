"""print() in kernels: the record format shared by the compiler and the runtime.

Numba CUDA lowers `print(a, b, ...)` to CUDA's vprintf: string constants print as
they are, integers with "%lld" ("%llu" unsigned, both widened to 64 bits), floats with
"%f" (widened to double), separated by spaces and ended by a newline.  Here each
launch of a kernel that prints gets a print buffer (umd/kernel_print.py allocates,
reads and recycles it), passed as the hidden argument `__print_buf`, and each
print() call appends one record to it:

    header  u32 reserved   bytes of records reserved so far (the lanes' atomic offset)
            u32 dropped    records that did not fit
            u32 capacity   bytes of record space after the header
            u32 0
    record  u32 format     1 + the print() site's number in CompiledKernel.prints
            u32 lo, hi     each value as 64 bits: the integer widened, the float a double

A lane reserves its record with one atomic add on `reserved`; a record that would
end past `capacity` is not written and `dropped` counts it (CUDA drops what does not
fit its printf FIFO too).  Offsets only grow, so every record before the first
dropped one is complete, and the buffer is zero beyond the written records: a reader
stops at a zero format word.
"""
from __future__ import annotations

import struct

HEADER_BYTES = 16
HEADER_WORDS = HEADER_BYTES // 4
ARG_NAME = "__print_buf"

# One print() site: a list of items, [kind, text]: "s" a string constant (text), "d"
# a signed integer, "u" an unsigned one, "f" a float, "b" a bool.
Format = list


def record_bytes(fmt: Format) -> int:
    return 4 + 8 * sum(kind != "s" for kind, _ in fmt)


def _item(kind: str, bits: int) -> str:
    if kind == "f":
        return "%f" % struct.unpack("<d", struct.pack("<Q", bits))[0]
    if kind == "d":
        return str(bits - (1 << 64) if bits >> 63 else bits)
    if kind == "b":
        return "True" if bits else "False"
    return str(bits)


def decode(formats: list[Format], raw: bytes) -> tuple[list[str], int]:
    """The lines a print buffer holds (in the order the lanes reserved them) and the
    number of records dropped."""
    reserved, dropped, capacity, _ = struct.unpack_from("<4I", raw)
    limit = min(reserved, capacity, len(raw) - HEADER_BYTES)
    lines, pos = [], 0
    while pos + 4 <= limit:
        fid = struct.unpack_from("<I", raw, HEADER_BYTES + pos)[0]
        if not 1 <= fid <= len(formats):
            break
        fmt = formats[fid - 1]
        size = record_bytes(fmt)
        if pos + size > limit:
            break
        words = struct.unpack_from(f"<{(size - 4) // 4}I", raw, HEADER_BYTES + pos + 4)
        values = iter(lo | hi << 32 for lo, hi in zip(words[::2], words[1::2]))
        lines.append(" ".join(text if kind == "s" else _item(kind, next(values))
                              for kind, text in fmt))
        pos += size
    return lines, dropped
