"""SDMA WRITE_LINEAR: the GPU writes a dword pattern into a GTT and a VRAM buffer.

    python samples/sdma_write_linear.py --device /tmp/vgpu
"""
import struct

from sdma_common import DOMAINS, SdmaTest, check, finish, parse_args

import libvgpu
from vgpu.errors import exit_main

PATTERN = 0xDEADBEAF


def main() -> None:
    args = parse_args(__doc__)
    ok = True
    with SdmaTest(args.device) as t:
        for domain in ("GTT", "VRAM"):
            print(f"WRITE_LINEAR of {args.size} bytes into {domain}:")
            dst = t.alloc(args.size, "destination", DOMAINS[domain])
            dst.cpu[:] = bytes(args.size)           # start from zeros, as libdrm does
            dwords = args.size // 4
            ib = libvgpu.SdmaIb()
            for off in range(0, dwords, 0x10000):   # WRITE_LINEAR counts up to 2^20 dwords
                n = min(0x10000, dwords - off)
                ib.write_linear(dst.va + off * 4, [PATTERN] * n)
            t.submit(ib, [dst], args.ring)
            ok &= check(domain, bytes(dst.cpu), struct.pack("<I", PATTERN) * dwords)
    finish(ok)


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
