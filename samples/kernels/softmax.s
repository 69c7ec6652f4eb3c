; y[r, :] = softmax(x[r, :]) over rows of n float32s; one workgroup of 64 threads per row.
; Each thread strides over the row (a divergent loop), then LDS trees give the row's
; max and the sum of exp(x - max).  Launch: grid (rows, 1, 1), block (64, 1, 1).
.kernel softmax
.arg x ptr
.arg y ptr
.arg n u32
.lds 256
.block 64 1 1
    s_load_dwordx4 s[20:23], s[0:1]         ; x, y
    s_load_dword s24, s[0:1], 16            ; n
    s_mul_i32 s25, s16, s24
    s_lshl_b32 s25, s25, 2                  ; byte offset of this row
    s_add_u32 s20, s20, s25                 ; x += row (64-bit add)
    s_addc_u32 s21, s21, 0
    s_add_u32 s22, s22, s25                 ; y += row
    s_addc_u32 s23, s23, 0
    v_lshl_b32 v6, v0, 2                    ; my LDS slot
    s_mov_b32 s26, exec                     ; saved exec for the strided loops
; pass 1: max
    v_mov_b32 v4, -inf
    v_mov_b32 v3, v0
max_loop:
    v_cmp_lt_u32 vcc, v3, s24
    s_and_b32 exec, exec, vcc
    s_cbranch_execz max_done
    v_lshl_b32 v5, v3, 2
    global_load_dword v7, v5, s[20:21]
    v_max_f32 v4, v4, v7
    v_add_u32 v3, v3, 64
    s_branch max_loop
max_done:
    s_mov_b32 exec, s26
    ds_write_b32 v6, v4
    s_barrier
    s_mov_b32 s27, 32
max_tree:
    v_cmp_lt_u32 vcc, v0, s27
    s_and_saveexec_b32 s28, vcc
    s_lshl_b32 s29, s27, 2
    v_add_u32 v11, v6, s29
    ds_read_b32 v12, v11
    ds_read_b32 v13, v6
    v_max_f32 v13, v13, v12
    ds_write_b32 v6, v13
    s_mov_b32 exec, s28
    s_barrier
    s_lshr_b32 s27, s27, 1
    s_cmp_gt_u32 s27, 0
    s_cbranch_scc1 max_tree
    v_mov_b32 v8, 0
    ds_read_b32 v9, v8                      ; row max
    s_barrier                               ; everyone has it before LDS is reused
; pass 2: sum of exp(x - max)
    v_mov_b32 v4, 0
    v_mov_b32 v3, v0
sum_loop:
    v_cmp_lt_u32 vcc, v3, s24
    s_and_b32 exec, exec, vcc
    s_cbranch_execz sum_done
    v_lshl_b32 v5, v3, 2
    global_load_dword v7, v5, s[20:21]
    v_sub_f32 v7, v7, v9
    v_exp_f32 v7, v7
    v_add_f32 v4, v4, v7
    v_add_u32 v3, v3, 64
    s_branch sum_loop
sum_done:
    s_mov_b32 exec, s26
    ds_write_b32 v6, v4
    s_barrier
    s_mov_b32 s27, 32
sum_tree:
    v_cmp_lt_u32 vcc, v0, s27
    s_and_saveexec_b32 s28, vcc
    s_lshl_b32 s29, s27, 2
    v_add_u32 v11, v6, s29
    ds_read_b32 v12, v11
    ds_read_b32 v13, v6
    v_add_f32 v13, v13, v12
    ds_write_b32 v6, v13
    s_mov_b32 exec, s28
    s_barrier
    s_lshr_b32 s27, s27, 1
    s_cmp_gt_u32 s27, 0
    s_cbranch_scc1 sum_tree
    ds_read_b32 v10, v8                     ; row sum
; pass 3: y = exp(x - max) / sum
    v_mov_b32 v3, v0
out_loop:
    v_cmp_lt_u32 vcc, v3, s24
    s_and_b32 exec, exec, vcc
    s_cbranch_execz out_done
    v_lshl_b32 v5, v3, 2
    global_load_dword v7, v5, s[20:21]
    v_sub_f32 v7, v7, v9
    v_exp_f32 v7, v7
    v_div_f32 v7, v7, v10
    global_store_dword v5, v7, s[22:23]
    v_add_u32 v3, v3, 64
    s_branch out_loop
out_done:
    s_endpgm
