"""kmd/ring_buffer.py: the frames amdgpu would have emitted, written at the write
pointer (wrapping at the ring's end), the read pointer moved by completed runs."""
import struct

from kmd.ring_buffer import ALIGN_MASK, NOP, RING_DW, RingBuffer, _sdma_frame


def _ring(rb: RingBuffer) -> list[int]:
    return list(struct.unpack(f"<{RING_DW}I", rb.dump()[12:]))


def test_a_frame_is_written_at_wptr_and_padded_to_the_alignment():
    rb = RingBuffer("sdma")
    rb.emit([(0x10000, 4)], 1)
    frame = _sdma_frame(0, [(0x10000, 4)], 1)
    assert rb.wptr % (ALIGN_MASK["sdma"] + 1) == 0 and rb.wptr >= len(frame)
    assert _ring(rb)[:rb.wptr] == frame + [NOP["sdma"]] * (rb.wptr - len(frame))
    assert rb.rptr == 0
    rb.completed(1)
    assert rb.rptr == rb.wptr


def test_frames_wrap_at_the_ring_end_and_completed_moves_rptr_in_order():
    rb = RingBuffer("compute")
    seq = 0
    ends = []
    while rb.wptr < RING_DW + 100:         # past the end: the later frames wrap
        seq += 1
        rb.emit([(0x20000 + 256 * seq, 8)], seq)
        ends.append(rb.wptr)
    assert rb.wptr > RING_DW
    # the last frame's first dword, where it wrapped to
    start = ends[-2] % RING_DW
    assert _ring(rb)[start] == NOP["compute"] or _ring(rb)[start] >> 30 == 3
    rb.completed(seq - 2)
    assert rb.rptr == ends[-3]
    rb.completed(seq)
    assert rb.rptr == ends[-1]
    h = struct.unpack("<3I", rb.dump()[:12])
    assert h == (rb.rptr % RING_DW, rb.wptr % RING_DW, rb.wptr % RING_DW)


def test_a_frame_longer_than_the_ring_keeps_its_last_dwords():
    rb = RingBuffer("sdma")
    ibs = [(0x40000 + 64 * i, 1) for i in range(RING_DW // 4)]   # 8 dwords an IB and more
    rb.emit(ibs, 1)
    frame = _sdma_frame(0, ibs, 1)
    assert rb.wptr > RING_DW
    padded = frame + [NOP["sdma"]] * (rb.wptr - len(frame))
    tail = padded[-RING_DW:]
    at = (rb.wptr - RING_DW) % RING_DW
    assert _ring(rb) == tail[RING_DW - at:] + tail[:RING_DW - at]
