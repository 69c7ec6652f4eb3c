"""userq_wait, the user-queue worker's wait for its write pointer (kmd/hw/_userq.pxi
and kmd/hw/userq_ref.py): at once, by polling for `spin` s, then by one FUTEX_WAIT
on the doorbell; -1 when nothing moved, -2 when the pointer is unmapped."""
import struct
import threading

import numpy as np
import pytest

from kmd.hw import _core, ref, userq_ref
from vgpu import futex

from .conftest import RW

VA = 0x2_0000_0000
IMPLS = {"core": (_core.PageTable, _core.userq_wait), "ref": (ref.PageTable, userq_ref.userq_wait)}


@pytest.fixture(params=sorted(IMPLS))
def q(request):
    """(wait, page table, wptr buffer, doorbell buffer): wptr at VA, 0 so far."""
    page_table, wait = IMPLS[request.param]
    pt, mem, db = page_table(), np.zeros(4096, np.uint8), np.zeros(2, np.uint32)
    pt.map(VA, mem, 0, 4096, RW)
    return wait, pt, mem, db


def set_wptr(mem, value: int) -> None:
    mem[:8] = np.frombuffer(struct.pack("<Q", value), np.uint8)


def test_a_moved_pointer_is_returned_at_once(q):
    wait, pt, mem, db = q
    set_wptr(mem, 12)
    assert wait(pt, db.ctypes.data, VA, 0, 0.0) == 12
    assert wait(pt, db.ctypes.data, VA, 0, 5.0, 5.0) == 12
    assert wait(pt, db.ctypes.data, VA, 12, 0.0) == -1


@pytest.mark.parametrize("spin", [0.0, 0.02, 0.05, 1.0])
def test_nothing_new_ends_the_wait_with_minus_one(q, spin):
    """The poll ends, and a spin longer than the timeout is cut to it."""
    wait, pt, mem, db = q
    assert wait(pt, db.ctypes.data, VA, 0, 0.05, spin) == -1


def test_a_pointer_written_during_the_poll_is_seen_without_a_doorbell(q):
    """spin == timeout: the whole wait polls, so only polling can see a write pointer
    that moves with neither a doorbell store nor a FUTEX_WAKE."""
    wait, pt, mem, db = q
    start = threading.Event()

    def producer():
        start.wait()
        set_wptr(mem, 40)
    t = threading.Thread(target=producer)
    t.start()
    start.set()
    got = wait(pt, db.ctypes.data, VA, 0, 10.0, 10.0)
    t.join()
    assert got == 40


def test_a_doorbell_rung_after_the_poll_ends_the_sleep(q):
    wait, pt, mem, db = q
    out = []
    t = threading.Thread(target=lambda: out.append(wait(pt, db.ctypes.data, VA, 0, 30.0, 0.001)))
    t.start()
    while t.is_alive() and not out:
        set_wptr(mem, 7)
        db[0] += 1
        futex.wake(db.ctypes.data, 1)
        t.join(0.01)
    t.join()
    assert out == [7]


def test_an_unmapped_pointer_is_minus_two_during_the_poll(q):
    wait, pt, mem, db = q
    assert wait(pt, db.ctypes.data, VA + 4096, 0, 0.05, 0.05) == -2
