"""abort() / preempt() / preempt_after() of the pure-Python engines (kmd/hw/ref.py's
SdmaEngine, kmd/hw/cu_ref.py's ComputeEngine); the Cython core has the same three on
an atomic int. docs/preemption.md has the rules."""
from __future__ import annotations


class RunControl:
    """Stop requests for the run in progress: `_stop` is None, "abort" or "preempt"
    (an abort overrides a preemption, never the reverse), read by the run at each of
    its boundaries (instructions for compute units; packets, chunks and poll steps for
    SDMA). `_trigger` is the test trigger's count, None when disarmed."""

    _running = False
    _stop: str | None = None
    _trigger: int | None = None

    def abort(self) -> bool:
        """Stop the run in progress at its next boundary (from another thread).

        Returns False (and does nothing) when no run is in progress.
        """
        if not self._running:
            return False
        self._stop = "abort"
        return True

    def preempt(self) -> bool:
        """Preempt the run in progress at its next boundary (from another thread): the
        result is 'preempted', with the resume that continues it. False (nothing done)
        when no run is in progress: a request never preempts a later run."""
        if not self._running:
            return False
        if self._stop is None:
            self._stop = "preempt"
        return True

    def preempt_after(self, n: int | None) -> None:
        """Test trigger: the next run that passes n boundaries is preempted at the
        next one (a compute unit counts instructions; SDMA packet and chunk starts);
        armed until it fires. None disarms it."""
        if n is not None and n < 0:
            raise ValueError(f"preempt_after: negative count {n}")
        self._trigger = n
