"""samples/syncobj_timeline.py through a real mount: each step it prints is checked."""
import re

from tests.e2e.test_samples import passed, run_sample


def test_syncobj_timeline_sample(vgpu_mount):
    out = passed(run_sample("syncobj_timeline", vgpu_mount))
    # the gated producer: three points submitted, none signalled
    assert "query: signalled up to point 0, last submitted point 3" in out
    # the consumers wait on sdma1 until their points signal
    assert "consumer fences busy: [True, True, True]" in out
    # a CPU wait on a point behind the gate times out
    assert "ETIME; signalled up to point 0" in out
    # CPU waits return once the points signal; the query follows
    assert re.search(r"point 2 signalled; query: signalled up to point [23],", out)
    assert "point 3 signalled; query: signalled up to point 3, last submitted point 3" in out
    # a CPU signal appends a point
    assert "query: signalled up to point 4, last submitted point 4" in out
    # every byte and the order of the GPU timestamps
    assert out.count("all 4096 bytes match") == 3 and "MISMATCH" not in out
    assert out.count("after the producer's block was done") == 3 and "OUT OF ORDER" not in out
