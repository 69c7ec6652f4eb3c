; C = A @ B, float32, row-major; A is M x K, B is K x N; M, N, K multiples of 8.
; One 8x8 tile of C per workgroup (64 threads = two waves); A and B tiles staged in LDS.
; Launch: grid (N // 8, M // 8, 1), block (8, 8, 1).
.kernel matmul_tiled
.arg a ptr
.arg b ptr
.arg c ptr
.arg m u32
.arg n u32
.arg k u32
.lds 512
.block 8 8 1
    s_load_dwordx4 s[20:23], s[0:1]         ; a, b
    s_load_dwordx4 s[24:27], s[0:1], 16     ; c, m, n
    s_load_dword s28, s[0:1], 32            ; k
    s_lshl_b32 s29, s17, 3
    v_add_u32 v3, s29, v1                   ; row = wg.y * 8 + ty
    s_lshl_b32 s30, s16, 3
    v_add_u32 v4, s30, v0                   ; col = wg.x * 8 + tx
    v_mov_b32 v5, 0                         ; acc
    v_lshl_b32 v6, v1, 3
    v_add_u32 v6, v6, v0
    v_lshl_b32 v6, v6, 2                    ; LDS slot (ty * 8 + tx) * 4
    s_mov_b32 s31, 0                        ; k0
tile:
    v_mul_lo_u32 v7, v3, s28                ; As[ty][tx] = A[row][k0 + tx]
    v_add_u32 v7, v7, s31
    v_add_u32 v7, v7, v0
    v_lshl_b32 v7, v7, 2
    global_load_dword v8, v7, s[20:21]
    ds_write_b32 v6, v8
    v_add_u32 v7, v1, s31                   ; Bs[ty][tx] = B[k0 + ty][col]
    v_mul_lo_u32 v7, v7, s27
    v_add_u32 v7, v7, v4
    v_lshl_b32 v7, v7, 2
    global_load_dword v8, v7, s[22:23]
    ds_write_b32 v6, v8, 256
    s_barrier
    v_lshl_b32 v9, v1, 5                    ; &As[ty][0]
    v_lshl_b32 v10, v0, 2                   ; &Bs[0][tx] - 256
    s_mov_b32 s32, 8
dot:
    ds_read_b32 v11, v9
    ds_read_b32 v12, v10, 256
    v_fma_f32 v5, v11, v12, v5
    v_add_u32 v9, v9, 4
    v_add_u32 v10, v10, 32
    s_sub_u32 s32, s32, 1
    s_cmp_gt_u32 s32, 0
    s_cbranch_scc1 dot
    s_barrier                               ; the tile is consumed before it is refilled
    s_add_u32 s31, s31, 8
    s_cmp_lt_u32 s31, s28
    s_cbranch_scc1 tile
    v_mul_lo_u32 v7, v3, s27                ; C[row][col]
    v_add_u32 v7, v7, v4
    v_lshl_b32 v7, v7, 2
    global_store_dword v7, v5, s[24:25]
    s_endpgm
