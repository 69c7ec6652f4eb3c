"""A ring's ring buffer as amdgpu fills it, for debugfs amdgpu_ring_<name>
(amdgpu_ring.c amdgpu_debugfs_ring_read).

vgpu's engines take a job's IBs from the scheduler, not from a ring in GPU memory,
so this buffer is a record, not an input: for every run of a job on the engine the
KMD writes the frame amdgpu would have emitted (the IB packet of each IB, then the
fence and its interrupt) and pads it as amdgpu_ring_commit does; the read pointer
moves past a frame when the engine finishes it. What a tool such as umr decodes
there is therefore what the engine ran, in order. Two differences from Linux, both
because vgpu has no such memory: the fence address is 0 (the write-back slot is the
ring's `fence_wb`, kmd/ring.py) and the VMID is 0 (a job runs in its file's VM).
"""
import array
import struct

from vgpu import pm4, sdma

# amdgpu_ring_init(adev, ring, 1024, ...): 1024 dwords a frame, times
# amdgpu_sched_hw_submission (2) frames in flight, rounded up to a power of two.
RING_DW = 2048
SDMA_OP_INDIRECT = 4                           # sdma_v4_0 SDMA_OP_INDIRECT
# ring->funcs->align_mask and ->nop of gfx_v9_0_ring_funcs_compute and sdma_v4_0_ring_funcs.
ALIGN_MASK = {"compute": 0xFF, "sdma": 0xF}
NOP = {"compute": pm4.pm4_type3_header(pm4.PKT3_NOP, 0x4000), "sdma": sdma.sdma_header(sdma.SDMA_OP_NOP)}


def _compute_frame(wptr: int, ibs, seq: int) -> list[int]:
    """gfx_v9_0_ring_emit_ib_compute for each IB, then gfx_v9_0_ring_emit_fence
    (write back and invalidate, the 32-bit seq of a job fence, interrupt)."""
    out = []
    for va, dwords in ibs:
        out += [pm4.pm4_type3_header(pm4.PKT3_INDIRECT_BUFFER, 3), va & 0xFFFFFFFC, (va >> 32) & 0xFFFF,
                pm4.IB_VALID | (dwords & pm4.IB_SIZE_MASK)]
    out += [pm4.pm4_type3_header(pm4.PKT3_RELEASE_MEM, 7),
            pm4.RELEASE_WB_INV | pm4.EVENT_CACHE_FLUSH_AND_INV_TS | pm4.EVENT_INDEX_EOP << 8,
            pm4.DATA_SEL_32 << 29 | pm4.INT_SEL_INT_WRITE_CONFIRM << 24, 0, 0,
            seq & 0xFFFFFFFF, seq >> 32 & 0xFFFFFFFF, 0]
    return out


_SDMA_NOP = NOP["sdma"]
_SDMA_INDIRECT = sdma.sdma_header(SDMA_OP_INDIRECT)
_SDMA_FENCE = sdma.sdma_header(sdma.SDMA_OP_FENCE)
_SDMA_TRAP = sdma.sdma_header(sdma.SDMA_OP_TRAP)


def _sdma_frame(wptr: int, ibs, seq: int) -> list[int]:
    """sdma_v4_0_ring_emit_ib for each IB (NOPs first so that the 6-dword packet ends
    on an 8-dword boundary), then sdma_v4_0_ring_emit_fence (32-bit seq) and its trap."""
    out = []
    for va, dwords in ibs:
        out += [_SDMA_NOP] * ((2 - (wptr + len(out))) & 7)
        out += [_SDMA_INDIRECT, va & 0xFFFFFFE0, va >> 32 & 0xFFFFFFFF, dwords, 0, 0]
    out += [_SDMA_FENCE, 0, 0, seq & 0xFFFFFFFF, _SDMA_TRAP, 0]
    return out


class RingBuffer:
    """RING_DW dwords, a write pointer that grows with each emitted frame and a read
    pointer at the end of the last frame the engine finished (both in dwords, not
    wrapped). `kind` is kmd.ring.Ring.kind ("sdma" or "compute")."""

    def __init__(self, kind: str):
        self.kind = kind
        self.ring = array.array("I", bytes(4 * RING_DW))
        self.wptr = self.rptr = 0
        self._ends: dict[int, int] = {}   # hardware seq -> wptr after its frame

    def emit(self, ibs, seq: int) -> None:
        """Write the frame of a run of `ibs` ((va, dwords) pairs) fenced with the
        hardware sequence number `seq`, padded to the ring's alignment."""
        frame = (_compute_frame if self.kind == "compute" else _sdma_frame)(self.wptr, ibs, seq)
        mask = ALIGN_MASK[self.kind]
        frame += [NOP[self.kind]] * ((mask + 1 - (self.wptr + len(frame)) & mask) & mask)
        # In slices up to the ring's end (a frame longer than the ring wraps over
        # itself, the last RING_DW dwords staying), not a store per dword.
        done, n = 0, len(frame)
        while done < n:
            at = (self.wptr + done) % RING_DW
            k = min(n - done, RING_DW - at)
            self.ring[at:at + k] = array.array("I", frame[done:done + k])
            done += k
        self.wptr += n
        self._ends[seq] = self.wptr

    def completed(self, seq: int) -> None:
        """The engine finished the run fenced with `seq` (and every earlier one)."""
        ends = self._ends
        while ends:
            first = next(iter(ends))   # runs are emitted in seq order
            if first > seq:
                break
            self.rptr = max(self.rptr, ends.pop(first))

    def dump(self) -> bytes:
        """amdgpu_debugfs_ring_read's file: rptr, hardware wptr and the driver's wptr
        masked to the ring (3 little-endian u32), then the ring's dwords."""
        mask = RING_DW - 1
        return struct.pack("<3I", self.rptr & mask, self.wptr & mask, self.wptr & mask) + self.ring.tobytes()
