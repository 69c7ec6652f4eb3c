"""SDMA COPY_LINEAR: the GPU copies a buffer filled by the CPU into another, for
every pair of GTT and VRAM source and destination.

    python samples/sdma_copy_linear.py --device /tmp/vgpu
"""
import os

from sdma_common import DOMAINS, SdmaTest, check, finish, parse_args

import libvgpu
from vgpu.errors import exit_main

MAX_COPY = 1 << 22  # one COPY_LINEAR moves at most 4 MiB (22-bit count)


def main() -> None:
    args = parse_args(__doc__)
    ok = True
    with SdmaTest(args.device) as t:
        for src_domain in ("GTT", "VRAM"):
            for dst_domain in ("GTT", "VRAM"):
                print(f"COPY_LINEAR of {args.size} bytes {src_domain} -> {dst_domain}:")
                src = t.alloc(args.size, "source", DOMAINS[src_domain])
                dst = t.alloc(args.size, "destination", DOMAINS[dst_domain])
                data = os.urandom(args.size)
                src.cpu[:] = data                  # CPU writes: the GPU sees them at once
                dst.cpu[:] = bytes(args.size)
                ib = libvgpu.SdmaIb()
                for off in range(0, args.size, MAX_COPY):
                    ib.copy_linear(dst.va + off, src.va + off, min(MAX_COPY, args.size - off))
                t.submit(ib, [src, dst], args.ring)
                ok &= check(f"{src_domain}->{dst_domain}", bytes(dst.cpu), data)
    finish(ok)


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
