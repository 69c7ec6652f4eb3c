"""disasm_sdma: one line per packet, stops at the first bad packet."""
from kmd.hw.sdma import SDMA_FILLSIZE_BYTE, SDMA_FUNC_GE, SdmaIb
from kmd.hw.sdma_disasm import disasm_sdma


def test_every_packet():
    ib = (SdmaIb().nop(2).copy_linear(0x1000, 0x2_0000_2000, 4096)
          .write_linear(0x3000, [1, 2]).fence(0x4000, 7).trap(3)
          .poll_regmem(0x5000, 1, mask=0xFF, func=SDMA_FUNC_GE)
          .constant_fill(0x6000, 0xAB, 100, SDMA_FILLSIZE_BYTE).timestamp(0x7000).raw(0x55))
    assert disasm_sdma(ib.dwords) == [
        "0000: NOP count=2",
        "0003: COPY_LINEAR bytes=4096 src=0x200002000 dst=0x1000 param=0x0",
        "000a: WRITE_LINEAR dst=0x3000 dwords=2 data=[0x1 0x2]",
        "0010: FENCE addr=0x4000 data=0x7",
        "0014: TRAP int_context=0x3",
        "0016: POLL_REGMEM mem addr=0x5000 (value & 0xff) >= 0x1 interval=10 retry=0xfff",
        "001c: CONSTANT_FILL dst=0x6000 byte value=0xab bytes=100",
        "0021: TIMESTAMP GET_GLOBAL addr=0x7000",
        "0024: <illegal_opcode> op=85 sub_op=0 [00000055]",
    ]


def test_truncated_packet():
    assert disasm_sdma(SdmaIb().fence(0, 1).dwords[:2]) == \
        ["0000: <truncated> op=5 sub_op=0 [00000005 00000000]"]
