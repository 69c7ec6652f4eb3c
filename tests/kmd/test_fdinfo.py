"""kmd/fdinfo.py: a client's engine time counts the job it has running now."""
import threading
import time
from types import SimpleNamespace

from kmd import fdinfo
from vgpu.paths import PCI_SLOT


class Obj(SimpleNamespace):
    """A stand-in for a DRM file or a user queue: hashed by identity, as they are
    (fdinfo keeps weak references to them)."""

    __hash__ = object.__hash__


def test_engine_time_includes_the_run_in_progress():
    f, other = Obj(usage=SimpleNamespace(engine_ns={"sdma": 5, "compute": 7}), userqs={}), Obj()
    now = time.monotonic()
    running = SimpleNamespace(file=f, segment_start=now - 0.5, run_time=0.25)
    dev = SimpleNamespace(rings={"comp": SimpleNamespace(kind="compute", running=running),
                                 "sdma0": SimpleNamespace(kind="sdma", running=SimpleNamespace(
                                     file=other, segment_start=now, run_time=0.0)),
                                 "sdma1": SimpleNamespace(kind="sdma", running=None)})
    ns = fdinfo.engine_ns(dev, f)
    assert ns["sdma"] == 5                                  # another file's job is not f's
    assert 0.75e9 <= ns["compute"] - 7 < 1.5e9              # 0.25 s before + 0.5 s of this run
    running.segment_start = None                            # between two runs (preempted):
    assert fdinfo.engine_ns(dev, f) == ns                   # held, not lowered (it runs on later)
    running.segment_start, running.run_time = time.monotonic(), 0.9    # running again, 0.9 s so far
    assert fdinfo.engine_ns(dev, f)["compute"] - 7 >= 0.9e9


def _queue_client(ip=None):
    """A file with one user queue whose worker has a run in progress (kmd/userq.py's
    fields that fdinfo reads), and a device with no ring job of it."""
    from kmd import perf
    from vgpu import uapi
    now = time.monotonic()
    worker = SimpleNamespace(run_started=now - 0.5)
    q = Obj(ip_type=uapi.AMDGPU_HW_IP_DMA if ip is None else ip, busy_time=2.0, worker=worker,
                        perf=perf.RingPerf("sdma"), name="sdma_userq0", id=1, priority=0, state="active",
                        reason="", segments=3, dwords_done=12, running_since=lambda: worker.run_started)
    f = Obj(usage=SimpleNamespace(engine_ns={}), userqs={1: q})
    return SimpleNamespace(rings={}), f, q


def test_a_queue_run_in_progress_counts_and_its_end_is_not_counted_twice():
    """The worker ends a run in three steps (kmd/userq_worker.py _run): busy_time +=
    the run, perf.ran(start, end), run_started = None. A read between them must not
    count the run twice (once in busy_time, once as in progress): the value nvtop
    differentiates must never go down."""
    dev, f, q = _queue_client()
    first = fdinfo.engine_ns(dev, f)["sdma"]
    assert 2.5e9 <= first < 3.5e9                         # 2 s of runs + 0.5 s of this one
    start = q.worker.run_started
    end = time.monotonic()
    q.busy_time += end - start                            # step 1: the run is in busy_time...
    q.perf.ran(start, end)                                # step 2: ... and in the busy window,
    between = fdinfo.engine_ns(dev, f)["sdma"]            # while run_started still names it
    q.worker.run_started = None                           # step 3: idle
    after = fdinfo.engine_ns(dev, f)["sdma"]
    assert first <= between <= after, (first, between, after)
    assert after == int(q.busy_time * 1e9)


def test_engine_time_never_goes_down_between_reads():
    """Read after read, a file's drm-engine-* only grows (nvtop drops a sample whose
    value went down, and shows 0 %), even when a run in progress is momentarily not
    seen (a ring job between two runs, a queue's run between its end's steps)."""
    dev, f, q = _queue_client()
    before = fdinfo.engine_ns(dev, f)["sdma"]
    q.worker.run_started = None                           # the run ended, busy_time not yet added
    assert fdinfo.engine_ns(dev, f)["sdma"] >= before
    q.busy_time += 0.6
    assert fdinfo.engine_ns(dev, f)["sdma"] >= before


def test_fdinfo_has_a_line_per_user_queue():
    """vgpu-userq-<name> (vgpu's own key): what `vgpu smi` lists per queue."""
    dev, f, q = _queue_client()
    dev.partition = SimpleNamespace(pci_slot=PCI_SLOT)
    dev.lock = threading.Lock()
    f.__dict__.update(id=3, pid=42, comm="app", uid=0, node="renderD128", bos={}, contexts={}, jobs={})
    f.usage.__dict__.update(jobs_submitted=0, faults=0, hangs=0)
    lines = dict(line.split(":\t", 1) for line in fdinfo.text(dev, f).splitlines())
    fields = lines["vgpu-userq-sdma_userq0"].split()
    info = dict(zip(fields[::2], fields[1::2]))
    assert info["id"] == "1" and info["ip"] == "dma" and info["priority"] == "normal-low"
    assert info["state"] == "active" and info["runs"] == "3"
    assert 2.5e9 <= int(info["busy-ns"]) < 3.5e9
    assert 0 <= int(info["busy-percent"]) <= 100
    assert lines["drm-engine-dma"] == f"{lines['drm-engine-dma'].split()[0]} ns"


def test_a_freed_queues_time_stays_in_its_files_engine_time():
    """A queue freed while its file stays open: the time it ran is still the file's
    (and the file's later work adds to it, rather than hiding under the old figure)."""
    dev, f, q = _queue_client()
    q.worker.run_started = None
    assert fdinfo.engine_ns(dev, f)["sdma"] == 2_000_000_000
    del f.userqs[1]                                       # USERQ FREE
    assert fdinfo.engine_ns(dev, f)["sdma"] == 2_000_000_000
    f.usage.engine_ns["sdma"] = 500_000_000               # then a ring job of 0.5 s
    assert fdinfo.engine_ns(dev, f)["sdma"] == 2_500_000_000
