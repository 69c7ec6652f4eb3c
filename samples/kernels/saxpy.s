; y[i] = a * x[i] + y[i] (float32), one thread per element.
; Launch: grid ((n + 63) // 64, 1, 1), block (64, 1, 1).
.kernel saxpy
.arg x ptr
.arg y ptr
.arg a f32
.arg n u32
.block 64 1 1
    s_load_dwordx4 s[20:23], s[0:1]         ; x, y
    s_load_dwordx2 s[24:25], s[0:1], 16     ; a, n
    s_lshl_b32 s26, s16, 6                  ; first element of this workgroup
    v_add_u32 v3, s26, v0                   ; i
    v_cmp_lt_u32 vcc, v3, s25               ; i < n
    s_and_saveexec_b32 s27, vcc
    s_cbranch_execz done
    v_lshl_b32 v4, v3, 2                    ; byte offset
    global_load_dword v5, v4, s[20:21]
    global_load_dword v6, v4, s[22:23]
    v_fma_f32 v6, s24, v5, v6
    global_store_dword v4, v6, s[22:23]
done:
    s_endpgm
