"""The soak in `make test`: 100,000 fuzzed requests from 4 processes against a real
mount, fuzzed IBs on every ring and a checksummed victim (tests/soak.py; `make soak`
sends 1,000,000). No crash, no hang, no victim failure, no leak once the clients
are gone, and the daemon's RSS flat after the first round (VRAM touched)."""
from tests.soak import print_report, run_soak


def test_soak_100000_requests():
    rep = run_soak(100_000, procs=4, rounds=2, seed=7, quiet=True)
    print()
    print_report(rep)
    assert rep["requests"] >= 100_000
    assert rep["crashes"] == 0 and rep["client_errors"] == 0, rep
    assert rep["hangs"] == 0, rep
    assert rep["victim_checks"] > 0 and rep["victim_failures"] == 0, rep.get("victim_notes")
    assert not rep["leaks"], rep["leaks"]
    assert rep["ok"], rep
