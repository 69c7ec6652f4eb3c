# SDMA v4 numbers for the Cython core; kmd/hw/sdma.py is the Python source of
# truth and tests/hw/test_defs.py checks that the two agree.
cdef enum:
    SDMA_OP_NOP = 0
    SDMA_OP_COPY = 1
    SDMA_OP_WRITE = 2
    SDMA_OP_FENCE = 5
    SDMA_OP_TRAP = 6
    SDMA_OP_POLL_REGMEM = 8
    SDMA_OP_CONST_FILL = 11
    SDMA_OP_TIMESTAMP = 13
    SDMA_SUBOP_COPY_LINEAR = 0
    SDMA_SUBOP_WRITE_LINEAR = 0
    SDMA_SUBOP_TIMESTAMP_GET_GLOBAL = 2
    SDMA_NOP_COUNT_MASK = 0x3FFF
    SDMA_COPY_COUNT_MASK = 0x3FFFFF
    SDMA_WRITE_COUNT_MASK = 0xFFFFF
    SDMA_CONST_FILL_COUNT_MASK = 0x3FFFFF
    SDMA_TRAP_INT_CONTEXT_MASK = 0xFFFFFFF
    SDMA_FILLSIZE_BYTE = 0
    SDMA_FILLSIZE_DWORD = 2
    SDMA_POLL_STEP_US = 50

# IH source ids (kmd/hw/ih.py)
cdef enum:
    IH_SRC_TRAP = 224
    IH_SRC_PAGE_FAULT = 146
    IH_SRC_PROT_FAULT = 147
    IH_SRC_ILLEGAL_INST = 184

# PTE bits (kmd/hw/mmu.py)
cdef enum:
    C_PTE_READ = 1 << 1
    C_PTE_WRITE = 1 << 2
    C_PTE_EXEC = 1 << 3
