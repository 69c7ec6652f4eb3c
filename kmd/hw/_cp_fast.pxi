# Helpers of the command processor's per-packet path (kmd/hw/cp.py), included by
# _core.pyx. Each does what a few lines of Python in cp.py would, with the same result;
# cp.py keeps those lines as its fallback when the core is not built.
from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem
from cpython.object cimport PyObject


def add_counters(dict mine, dict theirs):
    """mine[name] = mine.get(name, 0) + value for every (name, value) of `theirs`, in
    its order (a name new to `mine` goes to its end): CpResult.count's sum of the
    counters of a run's dispatches, a dict of some 16 ints per dispatch."""
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef PyObject* old
    while PyDict_Next(theirs, &pos, &key, &value):
        old = PyDict_GetItem(mine, <object>key)
        if old == NULL:
            PyDict_SetItem(mine, <object>key, 0 + <object>value)
        else:
            PyDict_SetItem(mine, <object>key, <object>old + <object>value)


def simple_packets(cp, tuple ib, Py_ssize_t pos, dict regs, dict ops, sh_ok,
                   uint32_t nop_filler, int nop, int set_sh_reg, uint32_t count_mask,
                   int release_mem, uint32_t release_dst_max, bint quiet_release):
    """Run the packets of `ib` from dword `pos` that cannot stop a run, as
    CommandProcessor._run_ib runs them (kmd/hw/cp.py): NOP fillers (counted as NOP in
    `ops`); SET_SH_REG packets whose (first register, body dwords) is in `sh_ok`
    (their values go to `regs`, in order); and, when `quiet_release` (the CP has no
    L2 model), RELEASE_MEM packets of 7 body dwords that write nothing and raise no
    interrupt (DATA_SEL none, INT_SEL 0, a valid DST_SEL: CommandProcessor._release_mem
    does nothing for them). Stops before any other packet, a malformed or truncated
    one, and before the next packet once cp._abort or cp._preempt is set (the caller
    then checks them at that packet, as for every packet). Returns (pos, packets run,
    dword offset and opcode of the last one run: -1, -1 if none)."""
    cdef Py_ssize_t end = len(ib), n, k, done = 0, last = -1
    cdef uint32_t hdr, sel
    cdef Py_ssize_t base
    cdef int op, last_op = -1
    while pos < end:
        if cp._abort or cp._preempt:
            break
        hdr = ib[pos]
        op = hdr >> 8 & 0xFF
        if hdr == nop_filler:
            ops[nop] = ops.get(nop, 0) + 1
            last, last_op = pos, op
            pos += 1
            done += 1
            continue
        if hdr >> 30 != 3 or hdr & 1:           # PM4_TYPE3, PM4_PREDICATE
            break
        n = (hdr >> 16 & count_mask) + 1
        if pos + 1 + n > end:
            break
        if op == release_mem:
            if not quiet_release or n != 7:
                break
            sel = ib[pos + 2]                   # data_sel [31:29], int_sel [26:24], dst_sel [17:16]
            if sel >> 29 != 0 or sel >> 24 & 7 != 0 or sel >> 16 & 3 > release_dst_max:
                break
            ops[op] = ops.get(op, 0) + 1
            last, last_op = pos, op
            pos += 1 + n
            done += 1
            continue
        if op != set_sh_reg:
            break
        first = ib[pos + 1]
        if (first, n) not in sh_ok:
            break
        base = first
        for k in range(n - 1):
            regs[base + k] = ib[pos + 2 + k]
        ops[op] = ops.get(op, 0) + 1
        last, last_op = pos, op
        pos += 1 + n
        done += 1
    return pos, done, last, last_op
