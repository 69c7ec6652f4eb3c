; relu[i] = max(x[i], 0); gelu[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
; Launch: grid ((n + 63) // 64, 1, 1), block (64, 1, 1).
.kernel relu_gelu
.arg x ptr
.arg relu ptr
.arg gelu ptr
.arg n u32
.block 64 1 1
    s_load_dwordx4 s[20:23], s[0:1]         ; x, relu
    s_load_dwordx2 s[24:25], s[0:1], 16     ; gelu
    s_load_dword s26, s[0:1], 24            ; n
    s_lshl_b32 s27, s16, 6
    v_add_u32 v3, s27, v0
    v_cmp_lt_u32 vcc, v3, s26
    s_and_saveexec_b32 s28, vcc
    s_cbranch_execz done
    v_lshl_b32 v4, v3, 2
    global_load_dword v5, v4, s[20:21]      ; x
    v_max_f32 v6, v5, 0.0
    global_store_dword v4, v6, s[22:23]
    v_mul_f32 v7, v5, v5                    ; x^2
    v_mul_f32 v7, v7, v5                    ; x^3
    v_mov_b32 v8, 0.044715
    v_fma_f32 v7, v7, v8, v5                ; x + 0.044715 x^3
    v_mul_f32 v7, v7, 0.7978845608028654    ; * sqrt(2/pi)
    v_tanh_f32 v7, v7
    v_add_f32 v7, v7, 1.0
    v_mul_f32 v7, v7, v5
    v_mul_f32 v7, v7, 0.5
    global_store_dword v4, v7, s[24:25]
done:
    s_endpgm
