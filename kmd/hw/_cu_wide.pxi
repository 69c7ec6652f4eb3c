# The 64-bit vISA operations of the Cython compute unit (docs/isa.md 4.8), included by
# _cu.pxi.  Values are register pairs v[n:n+1] / s[n:n+1], low half first; the
# reference is kmd/hw/wide_ref.py, whose arithmetic this file reproduces bit for bit.
from libc.math cimport fma as c_fma

cdef extern from *:
    """
    static inline double cu_d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
    static inline uint64_t cu_q(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
    /* NaN results are the canonical 64-bit NaN (docs/isa.md 3). */
    static inline uint64_t cu_canon64(double d) {
        return d != d ? 0x7FF8000000000000ull : cu_q(d);
    }
    static inline uint64_t cu_atomic_load64(uint64_t* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline int cu_atomic_cas64(uint64_t* p, uint64_t* expected, uint64_t desired) {
        return __atomic_compare_exchange_n(p, expected, desired, 0, __ATOMIC_SEQ_CST,
                                           __ATOMIC_SEQ_CST);
    }
    """
    double cu_d(uint64_t u) nogil
    uint64_t cu_q(double d) nogil
    uint64_t cu_canon64(double d) nogil
    uint64_t cu_atomic_load64(uint64_t* p) nogil
    bint cu_atomic_cas64(uint64_t* p, uint64_t* expected, uint64_t desired) nogil

DEF CANONICAL_NAN64 = 0x7FF8000000000000


cdef inline void read64(uint32_t* s, uint32_t* v, int c, uint64_t* out) noexcept nogil:
    """Lane values of a 64-bit source: a VGPR pair, or an SGPR pair broadcast."""
    cdef const uint32_t* lo
    cdef const uint32_t* hi
    cdef uint64_t x
    cdef int l
    if c >= OPR_VGPR:
        lo = v + (c - OPR_VGPR) * CU_WAVE
        hi = lo + CU_WAVE
        for l in range(CU_WAVE):
            out[l] = <uint64_t>lo[l] | (<uint64_t>hi[l] << 32)
    else:
        x = <uint64_t>s[c] | (<uint64_t>s[c + 1] << 32)
        for l in range(CU_WAVE):
            out[l] = x


cdef inline void write64(uint32_t* v, int c, const uint64_t* R, uint32_t m) noexcept nogil:
    cdef uint32_t* lo = v + (c - OPR_VGPR) * CU_WAVE
    cdef uint32_t* hi = lo + CU_WAVE
    cdef int l
    for l in range(CU_WAVE):
        if (m >> l) & 1:
            lo[l] = <uint32_t>R[l]
            hi[l] = <uint32_t>(R[l] >> 32)


cdef inline uint64_t min_f64(uint64_t a, uint64_t b) noexcept nogil:
    cdef double x = cu_d(a), y = cu_d(b)
    cdef uint64_t r
    if x != x:
        r = b
    elif y != y:
        r = a
    else:
        r = a if x < y else b
    return CANONICAL_NAN64 if cu_d(r) != cu_d(r) else r


cdef inline uint64_t max_f64(uint64_t a, uint64_t b) noexcept nogil:
    cdef double x = cu_d(a), y = cu_d(b)
    cdef uint64_t r
    if x != x:
        r = b
    elif y != y:
        r = a
    else:
        r = a if x > y else b
    return CANONICAL_NAN64 if cu_d(r) != cu_d(r) else r


@cython.cdivision(True)
cdef inline uint64_t div_i64(uint64_t ua, uint64_t ub) noexcept nogil:
    cdef int64_t a = <int64_t>ua, b = <int64_t>ub
    if b == 0:
        return 0xFFFFFFFFFFFFFFFFULL
    if ua == 0x8000000000000000ULL and b == -1:
        return ua
    return <uint64_t>(a // b)       # C division truncates toward zero


@cython.cdivision(True)
cdef inline uint64_t unary64(int op, uint64_t a) noexcept nogil:
    """Conversions and roundings whose source is 64-bit (v_cvt_f64_f32 is inline)."""
    cdef double x = cu_d(a), r
    if op == OP_V_CVT_F32_F64:
        return cu_f32(x)
    if op == OP_V_CVT_F64_I64:
        return cu_canon64(<double><int64_t>a)
    if op == OP_V_CVT_F64_U64:
        return cu_q(<double>a)
    if op == OP_V_CVT_F32_I64:
        return cu_u(<float><int64_t>a)      # one rounding, to nearest even
    if op == OP_V_CVT_F32_U64:
        return cu_u(<float>a)
    if op == OP_V_CVT_I64_F64:
        if x != x:
            return 0
        if x >= 9223372036854775808.0:
            return 0x7FFFFFFFFFFFFFFFULL
        if x <= -9223372036854775808.0:
            return 0x8000000000000000ULL
        return <uint64_t><int64_t>x
    if op == OP_V_CVT_U64_F64:
        if x != x or x <= -1.0:
            return 0
        if x >= 18446744073709551616.0:
            return 0xFFFFFFFFFFFFFFFFULL
        return <uint64_t>x
    if x != x:
        return CANONICAL_NAN64
    if op == OP_V_SQRT_F64:
        return cu_canon64(sqrt(x))
    if x == 0 or x - x != 0:            # the roundings keep ±0 and ±inf
        return a
    if op == OP_V_FLOOR_F64:
        r = floor(x)
    elif op == OP_V_CEIL_F64:
        r = ceil(x)
    elif op == OP_V_TRUNC_F64:
        r = trunc(x)
    else:
        r = rint(x)                     # round half to even
    return cu_q(copysign(r, x))


cdef inline bint compare64(int op, uint64_t a, uint64_t b) noexcept nogil:
    if op == OP_V_CMP_EQ_I64:
        return a == b
    if op == OP_V_CMP_LT_I64:
        return <int64_t>a < <int64_t>b
    if op == OP_V_CMP_LE_I64:
        return <int64_t>a <= <int64_t>b
    if op == OP_V_CMP_LT_U64:
        return a < b
    if op == OP_V_CMP_LE_U64:
        return a <= b
    if op == OP_V_CMP_EQ_F64:
        return cu_d(a) == cu_d(b)
    if op == OP_V_CMP_LT_F64:
        return cu_d(a) < cu_d(b)
    return cu_d(a) <= cu_d(b)


@cython.cdivision(True)
cdef int wide_alu(CuThread* T, uint32_t* s, uint32_t* v, WaveSt* w,
                  const DInst* d) noexcept nogil:
    """A 64-bit VALU instruction: sources are read whole before the destination pair
    is written (it may overlap them)."""
    cdef int op = d.op, l
    cdef uint32_t m = w.exec_, mask
    cdef uint64_t A[CU_WAVE]
    cdef uint64_t B[CU_WAVE]
    cdef uint64_t Cc[CU_WAVE]
    cdef uint64_t R[CU_WAVE]
    cdef uint32_t tmp[CU_WAVE]
    cdef const uint32_t* A32
    cdef uint32_t* D
    if op == OP_V_CVT_F64_F32:
        A32 = vsrc(T, s, v, w, d.src0, d.imm, tmp)
        for l in range(CU_WAVE):
            R[l] = cu_canon64(<double>cu_f(A32[l]))
        write64(v, d.dst, R, m)
        return 0
    read64(s, v, d.src0, A)
    if op >= OP_V_CMP_EQ_I64 and op <= OP_V_CMP_LE_F64:
        read64(s, v, d.src1, B)
        mask = 0
        for l in range(CU_WAVE):
            if (m >> l) & 1 and compare64(op, A[l], B[l]):
                mask |= (<uint32_t>1) << l
        swrite(s, w, d.dst, mask)
        return 0
    if op == OP_V_CVT_F32_F64 or op == OP_V_CVT_F32_I64 or op == OP_V_CVT_F32_U64:
        D = v + (d.dst - OPR_VGPR) * CU_WAVE
        for l in range(CU_WAVE):
            if (m >> l) & 1:
                D[l] = <uint32_t>unary64(op, A[l])
        return 0
    if op >= OP_V_LSHL_B64:             # shifts: a 32-bit amount, mod 64
        A32 = vsrc(T, s, v, w, d.src1, d.imm, tmp)
        if op == OP_V_LSHL_B64:
            for l in range(CU_WAVE):
                R[l] = A[l] << (A32[l] & 63)
        elif op == OP_V_LSHR_B64:
            for l in range(CU_WAVE):
                R[l] = A[l] >> (A32[l] & 63)
        else:
            for l in range(CU_WAVE):
                R[l] = <uint64_t>(<int64_t>A[l] >> (A32[l] & 63))
    elif op >= OP_V_ADD_F64:
        read64(s, v, d.src1, B)
        if op == OP_V_ADD_F64:
            for l in range(CU_WAVE):
                R[l] = cu_canon64(cu_d(A[l]) + cu_d(B[l]))
        elif op == OP_V_SUB_F64:
            for l in range(CU_WAVE):
                R[l] = cu_canon64(cu_d(A[l]) - cu_d(B[l]))
        elif op == OP_V_MUL_F64:
            for l in range(CU_WAVE):
                R[l] = cu_canon64(cu_d(A[l]) * cu_d(B[l]))
        elif op == OP_V_DIV_F64:
            for l in range(CU_WAVE):
                R[l] = cu_canon64(cu_d(A[l]) / cu_d(B[l]))
        elif op == OP_V_MIN_F64:
            for l in range(CU_WAVE):
                R[l] = min_f64(A[l], B[l])
        elif op == OP_V_MAX_F64:
            for l in range(CU_WAVE):
                R[l] = max_f64(A[l], B[l])
        elif op == OP_V_ADD_U64:
            for l in range(CU_WAVE):
                R[l] = A[l] + B[l]
        elif op == OP_V_SUB_U64:
            for l in range(CU_WAVE):
                R[l] = A[l] - B[l]
        elif op == OP_V_MUL_LO_U64:
            for l in range(CU_WAVE):
                R[l] = A[l] * B[l]
        elif op == OP_V_DIV_U64:
            for l in range(CU_WAVE):
                R[l] = A[l] // B[l] if B[l] else 0xFFFFFFFFFFFFFFFFULL
        else:
            for l in range(CU_WAVE):
                R[l] = div_i64(A[l], B[l])
    elif op == OP_V_FMA_F64:            # one rounding (C fma); contraction is off
        read64(s, v, d.src1, B)
        read64(s, v, d.src2, Cc)
        for l in range(CU_WAVE):
            R[l] = cu_canon64(c_fma(cu_d(A[l]), cu_d(B[l]), cu_d(Cc[l])))
    else:
        for l in range(CU_WAVE):
            if (m >> l) & 1:
                R[l] = unary64(op, A[l])
    write64(v, d.dst, R, m)
    return 0


cdef inline uint64_t atomic64(int op, uint64_t m, uint64_t d, uint64_t cmp) noexcept nogil:
    """New memory value of a 64-bit global atomic (old value m, data d), as
    wide_ref.ATOMIC computes it."""
    if op == OP_GLOBAL_ATOMIC_ADD_U64:
        return m + d
    if op == OP_GLOBAL_ATOMIC_ADD_F64:
        return cu_canon64(cu_d(m) + cu_d(d))
    if op == OP_GLOBAL_ATOMIC_MAX_I64:
        return m if <int64_t>m > <int64_t>d else d
    if op == OP_GLOBAL_ATOMIC_MAX_U64:
        return m if m > d else d
    if op == OP_GLOBAL_ATOMIC_MAX_F64:
        return max_f64(m, d)
    if op == OP_GLOBAL_ATOMIC_MIN_I64:
        return m if <int64_t>m < <int64_t>d else d
    if op == OP_GLOBAL_ATOMIC_MIN_U64:
        return m if m < d else d
    if op == OP_GLOBAL_ATOMIC_MIN_F64:
        return min_f64(m, d)
    if op == OP_GLOBAL_ATOMIC_XCHG_B64:
        return d
    return d if m == cmp else m         # cmpswap_b64


cdef int wide_mem(CuThread* T, uint32_t* s, uint32_t* v, WaveSt* w, const DInst* d,
                  CuFault* f) noexcept nogil:
    """global_load/store_dwordx2 and the 64-bit atomics: 8-byte aligned (so never across
    a page), lane by lane in ascending order; a load writes no lane when one faults."""
    cdef int op = d.op, l, access
    cdef uint32_t m = w.exec_
    cdef uint64_t addr, old, x, last_page = <uint64_t>NO_PAGE
    cdef uint64_t R[CU_WAVE]
    cdef uint64_t Dt[CU_WAVE]
    cdef uint64_t Cmp[CU_WAVE]
    cdef uint8_t* last_host = NULL
    cdef uint8_t* p
    cdef uint8_t* q
    tlb_check(T)
    if op != OP_GLOBAL_LOAD_DWORDX2:
        read64(s, v, d.src2, Dt)
    if op == OP_GLOBAL_ATOMIC_CMPSWAP_B64:       # v[n:n+3]: the data, then the compare value
        read64(s, v, d.src2 + 2, Cmp)
    access = ACCESS_READ if op == OP_GLOBAL_LOAD_DWORDX2 else ACCESS_WRITE
    if (op == OP_GLOBAL_LOAD_DWORDX2 or op == OP_GLOBAL_STORE_DWORDX2) and m == <uint32_t>0xFFFFFFFFU \
            and T.sh.l2 == NULL:
        # Fast path, as global_mem's: 32 consecutive qwords in one page (the x[i] of an
        # f64 array): one translation, one 256-byte copy; the same result and first fault.
        addr = gaddr(s, v, d, 0)
        if addr & 7 == 0 and (addr & PAGE_MASK) <= PAGE_SIZE - 8 * CU_WAVE:
            l = 1
            while l < CU_WAVE and gaddr(s, v, d, l) == addr + 8 * <uint64_t>l:
                l += 1
            if l == CU_WAVE:
                p = translate(T, addr, access, f)
                if p == NULL:
                    return 1
                if op == OP_GLOBAL_LOAD_DWORDX2:
                    memcpy(R, p, 8 * CU_WAVE)
                    write64(v, d.dst, R, m)
                else:
                    memcpy(p, Dt, 8 * CU_WAVE)
                return 0
    for l in range(CU_WAVE):
        if not (m >> l) & 1:
            continue
        addr = gaddr(s, v, d, l)
        if op == OP_GLOBAL_LOAD_DWORDX2 or op == OP_GLOBAL_STORE_DWORDX2:
            if misaligned(addr, 8, access, f):
                return 1
            if addr >> PAGE_SHIFT == last_page:        # lanes mostly share a page
                p = last_host + (addr & PAGE_MASK)
            else:
                p = translate(T, addr, access, f)
                if p == NULL:
                    return 1
                last_page, last_host = addr >> PAGE_SHIFT, p - (addr & PAGE_MASK)
            if T.sh.l2 != NULL:
                p = l2_at(T, p, addr, 0 if op == OP_GLOBAL_LOAD_DWORDX2 else 8)
            if op == OP_GLOBAL_LOAD_DWORDX2:
                memcpy(&R[l], p, 8)
            else:
                memcpy(p, &Dt[l], 8)
        else:                           # atomics: read access checked first, then write
            if misaligned(addr, 8, ACCESS_READ, f):
                return 1
            p = translate(T, addr, ACCESS_READ, f)
            if p == NULL:
                return 1
            q = translate(T, addr, ACCESS_WRITE, f)
            if q == NULL:
                return 1
            if T.sh.l2 != NULL:
                p = q = l2_at(T, p, addr, 8)
            old = cu_atomic_load64(<uint64_t*>p)
            while not cu_atomic_cas64(<uint64_t*>q, &old, atomic64(op, old, Dt[l], Cmp[l])):
                pass            # old now holds the value the other thread wrote
            if d.dst != OPR_OFF:
                R[l] = old
                write64(v, d.dst, R, (<uint32_t>1) << l)
    if op == OP_GLOBAL_LOAD_DWORDX2:
        write64(v, d.dst, R, m)
    return 0
