; out[0] += sum(x[0:n]) (float32): a tree reduction in LDS per workgroup of 64 threads
; (two waves, so the barriers matter), then one global_atomic_add_f32 per workgroup.
; Launch: grid ((n + 63) // 64, 1, 1), block (64, 1, 1); out[0] zeroed first.
.kernel reduce_sum
.arg x ptr
.arg out ptr
.arg n u32
.lds 256
.block 64 1 1
    s_load_dwordx4 s[20:23], s[0:1]         ; x, out
    s_load_dword s24, s[0:1], 16            ; n
    s_lshl_b32 s25, s16, 6
    v_add_u32 v3, s25, v0                   ; i
    v_mov_b32 v4, 0                         ; x[i] or 0 past the end
    v_cmp_lt_u32 vcc, v3, s24
    s_and_saveexec_b32 s26, vcc
    v_lshl_b32 v5, v3, 2
    global_load_dword v4, v5, s[20:21]
    s_mov_b32 exec, s26
    v_lshl_b32 v6, v0, 2                    ; my LDS slot
    ds_write_b32 v6, v4
    s_barrier
    s_mov_b32 s27, 32                       ; stride
tree:
    v_cmp_lt_u32 vcc, v0, s27               ; lanes below the stride add the upper half
    s_and_saveexec_b32 s26, vcc
    s_lshl_b32 s28, s27, 2
    v_add_u32 v7, v6, s28
    ds_read_b32 v8, v7
    ds_read_b32 v9, v6
    v_add_f32 v9, v9, v8
    ds_write_b32 v6, v9
    s_mov_b32 exec, s26
    s_barrier
    s_lshr_b32 s27, s27, 1
    s_cmp_gt_u32 s27, 0
    s_cbranch_scc1 tree
    v_cmp_eq_u32 vcc, v0, 0                 ; thread 0 publishes the workgroup's sum
    s_and_saveexec_b32 s26, vcc
    s_cbranch_execz done
    v_mov_b32 v10, 0
    ds_read_b32 v11, v10
    global_atomic_add_f32 off, v10, v11, s[22:23]
done:
    s_endpgm
