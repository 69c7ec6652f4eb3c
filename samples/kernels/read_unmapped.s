; dst[i] = src[i], where the caller passes a src nobody mapped: the first load
; page-faults (samples/gpu_fault.py). Launch: grid (1, 1, 1), block (64, 1, 1).
.kernel read_unmapped
.arg src ptr
.arg dst ptr
.block 64 1 1
    s_load_dwordx4 s[20:23], s[0:1]        ; src, dst
    v_lshl_b32 v3, v0, 2                   ; byte offset of element i
    global_load_dword v4, v3, s[20:21]     ; faults: src is not mapped
    global_store_dword v3, v4, s[22:23]
    s_endpgm
