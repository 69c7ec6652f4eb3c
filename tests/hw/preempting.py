"""Test helper: a compute engine's dispatches preempted by its instruction trigger at
given points and resumed until they end (docs/preemption.md)."""

# ComputeResult fields of the final wave that a preempted run must reproduce, and the
# counters its parts must add up to (the TLB and walk counters depend on the split).
WAVE_FIELDS = ("status", "pc", "workgroup", "wave", "exec", "vcc", "scc", "sgprs", "vgprs")
SUMMED = ("dispatches", "waves", "instructions", "lane_instructions", "valu", "salu", "smem",
          "vmem", "lds", "bytes_loaded", "bytes_stored", "atomics", "barriers")


class Preempting:
    """Stands in for a Rig's engine (the real engine does the work): each dispatch is
    preempted by the trigger at `points`, one part each, and resumed until it ends;
    `parts` keeps every part's result."""

    def __init__(self, engine, points, csa):
        self.engine, self.points, self.csa = engine, list(points), csa
        self.parts = []

    def dispatch(self, pt, code_va, **kw):
        resume = None
        for n in self.points + [None]:
            self.engine.preempt_after(n)
            r = self.engine.dispatch(pt, code_va, resume=resume, csa=self.csa, **kw)
            self.parts.append(r)
            if r.status != "preempted":
                break
            assert r.resume is not None
            resume = r.resume
        self.engine.preempt_after(None)
        while r.status == "preempted":
            r = self.engine.dispatch(pt, code_va, resume=r.resume, csa=self.csa, **kw)
            self.parts.append(r)
        return r
