"""kmd/fdinfo.py: a client's engine time counts the job it has running now."""
import time
from types import SimpleNamespace

from kmd import fdinfo


def test_engine_time_includes_the_run_in_progress():
    f, other = SimpleNamespace(usage=SimpleNamespace(engine_ns={"sdma": 5, "compute": 7}), userqs={}), SimpleNamespace()
    now = time.monotonic()
    running = SimpleNamespace(file=f, segment_start=now - 0.5, run_time=0.25)
    dev = SimpleNamespace(rings={"comp": SimpleNamespace(kind="compute", running=running),
                                 "sdma0": SimpleNamespace(kind="sdma", running=SimpleNamespace(
                                     file=other, segment_start=now, run_time=0.0)),
                                 "sdma1": SimpleNamespace(kind="sdma", running=None)})
    ns = fdinfo.engine_ns(dev, f)
    assert ns["sdma"] == 5                                  # another file's job is not f's
    assert 0.75e9 <= ns["compute"] - 7 < 1.5e9              # 0.25 s before + 0.5 s of this run
    running.segment_start = None                            # between two runs (preempted)
    assert fdinfo.engine_ns(dev, f) == {"sdma": 5, "compute": 7}
