"""BO lists (amdgpu_bo_list.c): the set of BOs a submission uses.

The flattened request carries `bo_number` entries of `bo_info_size` bytes each in
the extra data; a size other than drm_amdgpu_bo_list_entry's is accepted the way
amdgpu accepts it (the known prefix is read, a longer tail ignored).
"""
import ctypes
import errno

from vgpu import uapi

from .errors import KmdError, check
from .gem import lookup_bo

MAX_BOS = 1 << 16
ENTRY = uapi.drm_amdgpu_bo_list_entry


def parse_entries(file, data: bytes, count: int, entry_size: int) -> list:
    """Resolve `count` entries of `entry_size` bytes to BOs. EINVAL on a bad size or
    count, ENOENT on a bad handle. Duplicates are kept once."""
    check(0 < entry_size <= 256 and entry_size >= 4, errno.EINVAL, f"bo_info_size {entry_size} invalid")
    check(count <= MAX_BOS, errno.EINVAL, f"bo_number {count} over {MAX_BOS}")
    check(len(data) == count * entry_size, errno.EINVAL,
          f"extra data is {len(data)} bytes, expected {count} x {entry_size}")
    bos, seen = [], set()
    for i in range(count):
        raw = data[i * entry_size:(i + 1) * entry_size][: ctypes.sizeof(ENTRY)]
        e = ENTRY.from_buffer_copy(raw.ljust(ctypes.sizeof(ENTRY), b"\0"))
        bo = lookup_bo(file, e.bo_handle)
        if id(bo) not in seen:  # a set: 65,536 entries must not cost 65,536^2 / 2
            seen.add(id(bo))
            bos.append(bo)
    return bos


def bo_list(dev, file, args, extra):
    """CREATE a list (returns its handle), DESTROY it, or UPDATE its BOs.

    EINVAL: unknown operation, bad bo_info_size or bo_number, extra data of the
    wrong length. ENOENT: a bad BO handle or list handle."""
    a = args.in_
    if a.operation == uapi.AMDGPU_BO_LIST_OP_DESTROY:
        if file.bo_lists.pop(a.list_handle, None) is None:
            raise KmdError(errno.ENOENT, f"no BO list {a.list_handle}")
        return
    if a.operation not in (uapi.AMDGPU_BO_LIST_OP_CREATE, uapi.AMDGPU_BO_LIST_OP_UPDATE):
        raise KmdError(errno.EINVAL, f"unknown BO list operation {a.operation}")
    bos = parse_entries(file, extra, a.bo_number, a.bo_info_size)
    if a.operation == uapi.AMDGPU_BO_LIST_OP_UPDATE:
        check(a.list_handle in file.bo_lists, errno.ENOENT, f"no BO list {a.list_handle}")
        file.bo_lists[a.list_handle] = bos
        handle = a.list_handle
    else:
        handle = file.add_bo_list(bos)
    args.out.list_handle = handle
    args.out._pad = 0
