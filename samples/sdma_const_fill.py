"""SDMA CONSTANT_FILL: the GPU fills a GTT and a VRAM buffer with a dword value.

    python samples/sdma_const_fill.py --device /tmp/vgpu
"""
import struct

from sdma_common import DOMAINS, SdmaTest, check, finish, parse_args

import libvgpu
from vgpu.errors import exit_main

PATTERN = 0xDEADBEAF
MAX_FILL = 1 << 22  # one CONSTANT_FILL moves at most 4 MiB (22-bit count)


def main() -> None:
    args = parse_args(__doc__)
    ok = True
    with SdmaTest(args.device) as t:
        for domain in ("GTT", "VRAM"):
            print(f"CONSTANT_FILL of {args.size} bytes into {domain}:")
            dst = t.alloc(args.size, "destination", DOMAINS[domain])
            dst.cpu[:] = bytes(args.size)
            ib = libvgpu.SdmaIb()
            for off in range(0, args.size, MAX_FILL):
                ib.constant_fill(dst.va + off, PATTERN, min(MAX_FILL, args.size - off))
            t.submit(ib, [dst], args.ring)
            ok &= check(domain, bytes(dst.cpu), struct.pack("<I", PATTERN) * (args.size // 4))
    finish(ok)


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
