"""Many tiny kernels (one wave each) from umd, timed on user queues and on CS.

Each launch is one workgroup of 32 threads (one wave) that adds 1 to 32 counters.
`--count` of them go back to back on a stream and one synchronize waits for the
last: launches per second. Then one launch + synchronize at a time: the fixed cost
of a small launch. Both on a stream of user queues (umd's default where the device
offers them: no ioctl per launch, docs/umd.md "User queues") and on a CS stream
(`umd.Stream(userq=False)`, what VGPU_USERQ=0 gives every stream), in the same
process. The counters must equal the number of launches that ran.

    python samples/umd_tiny_kernels.py --device /tmp/vgpu [--count 10000]
"""
import argparse
import statistics
import time

import numpy as np

import umd
from session import add_device_argument
from umd import i32
from umd.userq_stream import userq_enabled
from vgpu.errors import UserError, exit_main

WAVE = 32


@umd.kernel
def bump(x: i32[:], n: i32):
    i = umd.grid(1)
    if i < n:
        x[i] += 1


def back_to_back(stream, x, count: int) -> float:
    """Seconds for `count` launches queued back to back, through the synchronize."""
    t0 = time.perf_counter()
    for _ in range(count):
        bump[1, WAVE, stream](x, WAVE)
    stream.synchronize()
    return time.perf_counter() - t0


def launch_and_sync(stream, x, rounds: int) -> float:
    """Median seconds of one launch + synchronize."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        bump[1, WAVE, stream](x, WAVE)
        stream.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p, default="umd's current device, $VGPU_MOUNT or /tmp/vgpu")
    p.add_argument("--count", type=int, default=10_000, help="kernels back to back each way (default 10000)")
    p.add_argument("--rounds", type=int, default=200, help="launch + synchronize rounds each way (default 200)")
    args = p.parse_args()
    if args.count < 1 or args.rounds < 1:
        raise UserError("--count and --rounds must be at least 1")
    dev = umd.set_device(args.device) if args.device else umd.get_device()
    print(f"device {dev.mount}: {dev.name}")
    if not userq_enabled(dev):
        raise UserError("this device's streams run on CS (no user queues, or VGPU_USERQ=0): nothing to compare")
    streams = {"user queues": umd.Stream(), "CS": umd.Stream(userq=False)}
    x = umd.zeros(WAVE, np.int32)
    expect = 0
    rate, fixed = {}, {}
    for name, s in streams.items():
        bump[1, WAVE, s](x, WAVE)          # compile, upload, make the queues
        s.synchronize()
        t = back_to_back(s, x, args.count)
        rate[name] = args.count / t
        fixed[name] = launch_and_sync(s, x, args.rounds)
        expect += 1 + args.count + args.rounds
        print(f"{name:>11}: {args.count} tiny kernels in {t * 1e3:.0f} ms, {rate[name]:,.0f} launches/s; "
              f"launch + synchronize {fixed[name] * 1e6:.0f} us (median of {args.rounds})")
    got = x.copy_to_host()
    if not (got == expect).all():
        print(f"FAIL: counters {got[:4]}..., want {expect}")
        return 1
    uq, cs = "user queues", "CS"
    print(f"user queues: {rate[uq] / rate[cs]:.2f}x the launches/s of CS, launch + synchronize "
          f"{fixed[cs] / fixed[uq]:.2f}x faster; every counter is {expect}")
    return 0


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
