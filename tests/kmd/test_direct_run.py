"""Direct runs (kmd/direct_run.py): a light SDMA job submitted to an idle ring runs in
the submitting thread before its CS returns; anything else (a copy, a poll, a job
behind a busy ring or with a dependency still pending) goes to the ring's worker,
in the scheduler's order; a direct job's fault is reported as a worker job's is."""
import errno
import struct
import threading

import pytest

from kmd.errors import KmdError
from kmd.hw import SdmaIb
from vgpu import uapi

from .test_cs import DMA, VA_A, VA_B, Setup


class RecordingEngine:
    """The ring's engine, noting the thread of each run."""

    def __init__(self, engine):
        self._engine = engine
        self.threads: list[str] = []

    def run(self, *args, **kwargs):
        self.threads.append(threading.current_thread().name)
        return self._engine.run(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._engine, name)


@pytest.fixture
def s(dev, client):
    return Setup(dev, client)


@pytest.fixture
def engine(dev):
    ring = dev.rings[(DMA, 0)]
    rec = ring.engine = RecordingEngine(ring.engine)
    yield rec
    ring.engine = rec._engine


def signalled_now(s, seq) -> bool:
    return s.wait(seq, timeout=0) == 0


def test_light_job_runs_in_the_submitting_thread(s, engine):
    for ib in (SdmaIb().nop(), SdmaIb().fence(VA_A, 7), SdmaIb().write_linear(VA_A + 8, [1, 2, 3])):
        seq = s.submit(ib)
        assert signalled_now(s, seq)
    assert engine.threads == [threading.current_thread().name] * 3
    assert s.bo(s.a).read(0, 4) == struct.pack("<I", 7)
    assert s.bo(s.a).read(8, 12) == struct.pack("<3I", 1, 2, 3)
    assert s.dev.rings[(DMA, 0)].jobs_done == 3


def test_copy_goes_to_the_worker(s, engine):
    s.bo(s.a).write(0, b"abcd")
    seq = s.submit(SdmaIb().copy_linear(VA_B, VA_A, 4))
    assert s.wait(seq) == 0
    assert s.bo(s.b).read(0, 4) == b"abcd"
    assert engine.threads == ["ring-sdma0"]


def test_light_job_behind_a_busy_ring_waits_its_turn(s, engine):
    blocker = s.submit(SdmaIb().poll_regmem(VA_A, 1))
    light = s.submit(SdmaIb().fence(VA_B, 5))
    assert not signalled_now(s, light)
    assert s.bo(s.b).read(0, 4) == b"\0" * 4
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(blocker) == 0 and s.wait(light) == 0
    assert s.bo(s.b).read(0, 4) == struct.pack("<I", 5)
    assert engine.threads == ["ring-sdma0", "ring-sdma0"]


def test_light_job_with_a_pending_dependency_goes_to_the_worker(s, engine):
    blocker = s.submit(SdmaIb().poll_regmem(VA_A, 1), ring=1)
    dep = uapi.drm_amdgpu_cs_chunk_dep(ip_type=DMA, ring=1, ctx_id=s.ctx, handle=blocker)
    light = s.submit(SdmaIb().fence(VA_B, 9), deps=[dep])
    assert not signalled_now(s, light)
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(light) == 0
    assert s.bo(s.b).read(0, 4) == struct.pack("<I", 9)
    assert engine.threads == ["ring-sdma0"]


def test_direct_job_fault_is_reported(s, engine):
    seq = s.submit(SdmaIb().write_linear(0x7F000000, [1]))   # nothing mapped there
    assert engine.threads == [threading.current_thread().name]
    with pytest.raises(KmdError) as e:
        s.wait(seq)
    assert e.value.errno == errno.EFAULT
    log = s.dev.kmsg.text()
    assert "[gfxhub] page fault" in log and "at VA 0x00007f000000 on sdma0" in log
    assert s.f.usage.faults == 1
