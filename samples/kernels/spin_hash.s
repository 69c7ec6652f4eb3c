; out[i] = h^rounds(i), h(x) = x * 1664525 + 1013904223 (mod 2^32), one thread per
; element: a kernel whose run time is set by `rounds` (samples/preemption.py).
; Launch: grid ((n + 63) // 64, 1, 1), block (64, 1, 1).
.kernel spin_hash
.arg out ptr
.arg n u32
.arg rounds u32
.block 64 1 1
    s_load_dwordx2 s[20:21], s[0:1]         ; out
    s_load_dwordx2 s[22:23], s[0:1], 8      ; n, rounds
    s_lshl_b32 s26, s16, 6                  ; first element of this workgroup
    v_add_u32 v3, s26, v0                   ; i
    v_cmp_lt_u32 vcc, v3, s22               ; i < n
    s_and_saveexec_b32 s27, vcc
    s_cbranch_execz done
    v_mov_b32 v5, v3                        ; x = i
    s_mov_b32 s28, 1664525
    s_mov_b32 s29, 1013904223
    s_mov_b32 s24, s23                      ; rounds left
    s_cmp_eq_u32 s24, 0
    s_cbranch_scc1 store
again:
    v_mul_lo_u32 v5, v5, s28
    v_add_u32 v5, v5, s29
    s_sub_u32 s24, s24, 1
    s_cmp_ne_u32 s24, 0
    s_cbranch_scc1 again
store:
    v_lshl_b32 v4, v3, 2                    ; byte offset
    global_store_dword v4, v5, s[20:21]
done:
    s_endpgm
