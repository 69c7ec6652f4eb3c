; c[i] = a[i] + b[i] (float32), one thread per element, 64 threads per workgroup.
; Launch: grid ((n + 63) // 64, 1, 1), block (64, 1, 1); kernargs in s[0:1].
.kernel vector_add
.arg a ptr
.arg b ptr
.arg c ptr
.arg n u32
.block 64 1 1
    s_load_dwordx4 s[20:23], s[0:1]        ; a, b
    s_load_dwordx2 s[24:25], s[0:1], 16    ; c
    s_load_dword s26, s[0:1], 24           ; n
    s_lshl_b32 s27, s16, 6                 ; wg * 64
    v_add_u32 v3, s27, v0                  ; i
    v_cmp_lt_u32 vcc, v3, s26
    s_and_saveexec_b32 s28, vcc
    s_cbranch_execz done
    v_lshl_b32 v4, v3, 2
    global_load_dword v5, v4, s[20:21]
    global_load_dword v6, v4, s[22:23]
    v_add_f32 v5, v5, v6
    global_store_dword v4, v5, s[24:25]
done:
    s_endpgm
