"""Decoding of vgpu requests for `vgpu trace`: one formatter per request and reply,
names for the uapi numbers; :func:`decode_record` for the daemon's record of a request
(its struct, the data its pointers pointed to, the reply), and the frame decoders
(decode_request/decode_reply) for the legacy transport's data in old strace logs.

Kept apart from vgpu_tools/trace.py (which matches strace's calls with the records)
so that each new ioctl only touches this table.
"""
from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import dataclass

from vgpu import frame as vframe, uapi
from vgpu.timeout import INFINITE, S64_MAX


# ---------------------------------------------------------------------------
# Names of numbers, from the uapi constants
# ---------------------------------------------------------------------------
def _enum(prefix: str, skip: tuple[str, ...] = (), keep: tuple[str, ...] = ()) -> dict[int, str]:
    table: dict[int, str] = {}
    for name, value in vars(uapi).items():
        if not name.startswith(prefix) or not isinstance(value, int):
            continue
        short = name[len(prefix):]
        if short in keep or not short.startswith(skip) and short not in skip:
            table.setdefault(value, short)
    return table


DOMAINS = _enum("AMDGPU_GEM_DOMAIN_", skip=("MASK",))
GEM_CREATE_FLAGS = _enum("AMDGPU_GEM_CREATE_")
INFO_QUERIES = _enum("AMDGPU_INFO_", skip=("FW_", "SENSOR_", "VBIOS_", "MMR_", "VIDEO_CAPS_"),
                     keep=("FW_VERSION",))
INFO_QUERIES.update({v: "VGPU_INFO_" + n for v, n in _enum("VGPU_INFO_").items()})   # vgpu's own
FW_TYPES = _enum("AMDGPU_INFO_FW_", skip=("VERSION",))
SENSORS = _enum("AMDGPU_INFO_SENSOR_")
HW_IPS = _enum("AMDGPU_HW_IP_", skip=("NUM", "INSTANCE_MAX_COUNT"))
VA_OPS = _enum("AMDGPU_VA_OP_")
VA_FLAGS = {uapi.AMDGPU_VM_DELAY_UPDATE: "DELAY_UPDATE", uapi.AMDGPU_VM_PAGE_READABLE: "READ",
            uapi.AMDGPU_VM_PAGE_WRITEABLE: "WRITE", uapi.AMDGPU_VM_PAGE_EXECUTABLE: "EXEC",
            uapi.AMDGPU_VM_PAGE_PRT: "PRT"}
MTYPES = {v: k[len("AMDGPU_VM_MTYPE_"):] for k, v in vars(uapi).items()
          if k.startswith("AMDGPU_VM_MTYPE_") and k != "AMDGPU_VM_MTYPE_MASK"}
CTX_OPS = _enum("AMDGPU_CTX_OP_")
CTX_PRIORITIES = _enum("AMDGPU_CTX_PRIORITY_")
CTX_RESET = {uapi.AMDGPU_CTX_NO_RESET: "NO_RESET", uapi.AMDGPU_CTX_GUILTY_RESET: "GUILTY_RESET",
             uapi.AMDGPU_CTX_INNOCENT_RESET: "INNOCENT_RESET",
             uapi.AMDGPU_CTX_UNKNOWN_RESET: "UNKNOWN_RESET"}
CTX_QUERY2_FLAGS = _enum("AMDGPU_CTX_QUERY2_FLAGS_")
BO_LIST_OPS = _enum("AMDGPU_BO_LIST_OP_")
CHUNK_IDS = _enum("AMDGPU_CHUNK_ID_")
IB_FLAGS = {**_enum("AMDGPU_IB_FLAG_"), uapi.AMDGPU_IB_FLAGS_SECURE: "SECURE"}
DRM_CAPS = _enum("DRM_CAP_")
GEM_OPS = _enum("AMDGPU_GEM_OP_")
SYNCOBJ_WAIT_FLAGS = _enum("DRM_SYNCOBJ_WAIT_FLAGS_")
PRIME_FLAGS = {uapi.DRM_CLOEXEC: "CLOEXEC", uapi.DRM_RDWR: "RDWR"}
USERPTR_FLAGS = {uapi.AMDGPU_GEM_USERPTR_READONLY: "READONLY", uapi.AMDGPU_GEM_USERPTR_ANONONLY: "ANONONLY",
                 uapi.AMDGPU_GEM_USERPTR_VALIDATE: "VALIDATE", uapi.AMDGPU_GEM_USERPTR_REGISTER: "REGISTER"}
FENCE_TO_HANDLE = _enum("AMDGPU_FENCE_TO_HANDLE_")
STABLE_PSTATES = _enum("AMDGPU_CTX_STABLE_PSTATE_", skip=("FLAGS_MASK",))
METADATA_OPS = _enum("AMDGPU_GEM_METADATA_OP_")
VM_OPS = _enum("AMDGPU_VM_OP_")
# INFO READ_MMR_REG: the register names of soc15's whitelist (absolute dword offsets,
# as kmd/info.py answers them for an Arcturus part: GC at 0x2000, SDMA0 0x1260, SDMA1 0x1860).
MMR_REGISTERS = {
    0x2004: "GRBM_STATUS", 0x2002: "GRBM_STATUS2", 0x2005: "GRBM_STATUS_SE0", 0x2006: "GRBM_STATUS_SE1",
    0x200E: "GRBM_STATUS_SE2", 0x200F: "GRBM_STATUS_SE3", 0x1285: "SDMA0_STATUS_REG",
    0x1885: "SDMA1_STATUS_REG", 0x21A0: "CP_STAT", 0x219D: "CP_STALLED_STAT1", 0x219E: "CP_STALLED_STAT2",
    0x219C: "CP_STALLED_STAT3", 0x2088: "CP_CPF_BUSY_STAT", 0x2089: "CP_CPF_STALLED_STAT1",
    0x2087: "CP_CPF_STATUS", 0x2085: "CP_CPC_BUSY_STAT", 0x2086: "CP_CPC_STALLED_STAT1",
    0x2084: "CP_CPC_STATUS", 0x263E: "GB_ADDR_CONFIG", 0x260D: "DB_DEBUG2",
}


def name_of(value: int, table: dict[int, str]) -> str:
    return table.get(value, str(value))


def flags_of(value: int, table: dict[int, str]) -> str:
    """``READ|WRITE|EXEC``; unknown bits as hex; ``0`` for none."""
    names, rest = [], value
    for bit, name in sorted(table.items()):
        if bit and value & bit == bit:
            names.append(name)
            rest &= ~bit
    if rest:
        names.append(hex(rest))
    return "|".join(names) or "0"


def _timeout(value: int) -> str:
    return "inf" if value in (INFINITE, S64_MAX) else str(value)


def _ip(ip_type: int, instance: int, ring: int) -> str:
    return f"ip={name_of(ip_type, HW_IPS)}" + (f" instance={instance}" if instance else "") \
        + f" ring={ring}"


def _fields(obj, skip_pad: bool = True) -> list[tuple[str, object]]:
    """(name, value) of every field, nested structs flattened as ``a.b``."""
    out: list[tuple[str, object]] = []
    anonymous = set(getattr(type(obj), "_anonymous_", ()))
    for name, ctype, *_ in type(obj)._fields_:
        value = getattr(obj, name)
        if skip_pad and ("pad" in name) and not _nonzero(value):
            continue
        if isinstance(value, (ctypes.Structure, ctypes.Union)):
            inner = _fields(value, skip_pad)
            if name in anonymous:
                out += inner
            else:
                out += [(f"{name}.{n}", v) for n, v in inner]
        elif isinstance(value, ctypes.Array):
            out.append((name, _array(value)))
        else:
            out.append((name, value))
    return out


def _array(value) -> object:
    items = [(_array(v) if isinstance(v, ctypes.Array) else v) for v in value]
    return items


def _nonzero(value) -> bool:
    if isinstance(value, (ctypes.Structure, ctypes.Union, ctypes.Array)):
        return any(bytes(value))
    return bool(value)


def generic(obj) -> str:
    """Every field of ``obj``, ``{a=1, b.c=2}``."""
    return "{" + ", ".join(f"{n}={v}" for n, v in _fields(obj)) + "}"


def _braces(*parts: str) -> str:
    return "{" + ", ".join(p for p in parts if p) + "}"


def _u32s(data: bytes, count: int) -> list[int]:
    data = data[:4 * count].ljust(4 * count, b"\0")
    return [int.from_bytes(data[i:i + 4], "little") for i in range(0, 4 * count, 4)]


def _u64s(data: bytes, count: int) -> list[int]:
    data = data[:8 * count].ljust(8 * count, b"\0")
    return [int.from_bytes(data[i:i + 8], "little") for i in range(0, 8 * count, 8)]


def _list(items) -> str:
    return "[" + ", ".join(str(i) for i in items) + "]"


# ---------------------------------------------------------------------------
# Per-ioctl formatting: request (struct, extra) and reply (request struct,
# reply struct, out-data). Anything without an entry gets `generic`.
# ---------------------------------------------------------------------------
def _req_version(s, extra):
    return _braces(f"name_len={s.name_len}", f"date_len={s.date_len}", f"desc_len={s.desc_len}")


def _rep_version(req, s, extra):
    parts = [f"version={s.version_major}.{s.version_minor}.{s.version_patchlevel}"]
    offset = 0
    # The out-data holds each string in the length the REQUEST asked for (cut or
    # zero-padded, docs/design.md section 3); the reply's *_len are the full lengths.
    for field in ("name", "date", "desc"):
        asked, true_len = getattr(req, f"{field}_len"), getattr(s, f"{field}_len")
        n = min(asked, true_len)
        if n and offset + asked <= len(extra):
            text = extra[offset:offset + n].decode("utf-8", "replace")
            parts.append(f'{field}="{text}"')
        else:
            parts.append(f"{field}_len={true_len}")
        offset += asked
    return _braces(*parts)


def _req_gem_create(s, extra):
    i = s.in_
    return _braces(f"bo_size={i.bo_size}", f"alignment={i.alignment}",
                   f"domains={flags_of(i.domains, DOMAINS)}",
                   f"flags={flags_of(i.domain_flags, GEM_CREATE_FLAGS)}")


def _rep_gem_mmap(req, s, extra):
    return _braces(f"offset={s.out.addr_ptr:#x} (bo/{s.out.addr_ptr:x})")


def _req_ctx(s, extra):
    i = s.in_
    parts = [f"op={name_of(i.op, CTX_OPS)}"]
    if i.op == uapi.AMDGPU_CTX_OP_ALLOC_CTX:
        parts.append(f"priority={name_of(i.priority, CTX_PRIORITIES)}")
    else:
        parts.append(f"ctx_id={i.ctx_id}")
    if i.op == uapi.AMDGPU_CTX_OP_SET_STABLE_PSTATE:
        parts.append(f"pstate={name_of(i.flags, STABLE_PSTATES)}")
    elif i.flags:
        parts.append(f"flags={i.flags:#x}")
    return _braces(*parts)


def _rep_ctx(req, s, extra):
    op = req.in_.op
    if op == uapi.AMDGPU_CTX_OP_ALLOC_CTX:
        return _braces(f"ctx_id={s.out.alloc.ctx_id}")
    if op == uapi.AMDGPU_CTX_OP_QUERY_STATE:
        st = s.out.state
        return _braces(f"reset_status={name_of(st.reset_status, CTX_RESET)}", f"hangs={st.hangs}")
    if op == uapi.AMDGPU_CTX_OP_QUERY_STATE2:
        return _braces(f"flags={flags_of(s.out.state.flags, CTX_QUERY2_FLAGS)}")
    if op == uapi.AMDGPU_CTX_OP_GET_STABLE_PSTATE:
        return _braces(f"pstate={name_of(s.out.pstate.flags, STABLE_PSTATES)}")
    return ""


def _req_bo_list(s, extra):
    i = s.in_
    parts = [f"op={name_of(i.operation, BO_LIST_OPS)}"]
    if i.operation != uapi.AMDGPU_BO_LIST_OP_CREATE:
        parts.append(f"list_handle={i.list_handle}")
    if i.operation != uapi.AMDGPU_BO_LIST_OP_DESTROY:
        size = i.bo_info_size or ctypes.sizeof(uapi.drm_amdgpu_bo_list_entry)
        entries = [uapi.drm_amdgpu_bo_list_entry.from_bytes(extra[k * size:(k + 1) * size])
                   for k in range(i.bo_number)]
        handles = [str(e.bo_handle) + (f"@prio{e.bo_priority}" if e.bo_priority else "")
                   for e in entries]
        parts += [f"bo_number={i.bo_number}", f"handles={_list(handles)}"]
    return _braces(*parts)


def _rep_bo_list(req, s, extra):
    if req.in_.operation == uapi.AMDGPU_BO_LIST_OP_CREATE:
        return _braces(f"list_handle={s.out.list_handle}")
    return ""


def _chunk(chunk_id: int, data: bytes) -> str:
    """One CS chunk: ``IB{va=0x..., size=N bytes, ip=DMA ring=0}``..."""
    name = name_of(chunk_id, CHUNK_IDS)
    if chunk_id == uapi.AMDGPU_CHUNK_ID_IB:
        ib = uapi.drm_amdgpu_cs_chunk_ib.from_bytes(data)
        flags = f", flags={flags_of(ib.flags, IB_FLAGS)}" if ib.flags else ""
        return (f"IB{{va={ib.va_start:#x}, size={ib.ib_bytes} bytes, "
                f"{_ip(ib.ip_type, ib.ip_instance, ib.ring)}{flags}}}")
    if chunk_id == uapi.AMDGPU_CHUNK_ID_FENCE:
        f = uapi.drm_amdgpu_cs_chunk_fence.from_bytes(data)
        return f"FENCE{{handle={f.handle}, offset={f.offset}}}"
    if chunk_id in (uapi.AMDGPU_CHUNK_ID_DEPENDENCIES, uapi.AMDGPU_CHUNK_ID_SCHEDULED_DEPENDENCIES):
        size = ctypes.sizeof(uapi.drm_amdgpu_cs_chunk_dep)
        deps = [uapi.drm_amdgpu_cs_chunk_dep.from_bytes(data[k:k + size])
                for k in range(0, len(data) - size + 1, size)]
        return name + _list(f"{{ctx={d.ctx_id} {_ip(d.ip_type, d.ip_instance, d.ring)} "
                            f"seq={d.handle}}}" for d in deps)
    if chunk_id in (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT):
        return name + _list(_u32s(data, len(data) // 4))
    if chunk_id in (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT,
                    uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL):
        size = ctypes.sizeof(uapi.drm_amdgpu_cs_chunk_syncobj)
        objs = [uapi.drm_amdgpu_cs_chunk_syncobj.from_bytes(data[k:k + size])
                for k in range(0, len(data) - size + 1, size)]
        return name + _list(f"{o.handle}@{o.point}" + (f" flags={o.flags:#x}" if o.flags else "")
                            for o in objs)
    if chunk_id == uapi.AMDGPU_CHUNK_ID_BO_HANDLES:
        lst = uapi.drm_amdgpu_bo_list_in.from_bytes(data)
        return f"BO_HANDLES{{bo_number={lst.bo_number}}}"
    return f"{name}{{{len(data)} bytes}}"


def _req_cs(s, extra):
    i = s.in_
    chunks, offset = [], 0
    hdr = ctypes.sizeof(uapi.drm_amdgpu_cs_chunk)
    for _ in range(i.num_chunks):
        if offset + hdr > len(extra):
            chunks.append("<missing>")
            break
        c = uapi.drm_amdgpu_cs_chunk.from_bytes(extra[offset:offset + hdr])
        data = extra[offset + hdr:offset + hdr + 4 * c.length_dw]
        chunks.append(_chunk(c.chunk_id, data))
        offset += hdr + 4 * c.length_dw
    parts = [f"ctx={i.ctx_id}", f"bo_list={i.bo_list_handle}", f"chunks={_list(chunks)}"]
    if i.flags:
        parts.append(f"flags={i.flags:#x}")
    return _braces(*parts)


def _rep_cs(req, s, extra):
    return _braces(f"seq={s.out.handle}")


_INFO_ANSWERS = {
    uapi.AMDGPU_INFO_HW_IP_INFO: uapi.drm_amdgpu_info_hw_ip,
    uapi.AMDGPU_INFO_FW_VERSION: uapi.drm_amdgpu_info_firmware,
    uapi.AMDGPU_INFO_VRAM_GTT: uapi.drm_amdgpu_info_vram_gtt,
    uapi.AMDGPU_INFO_GDS_CONFIG: uapi.drm_amdgpu_info_gds,
    uapi.VGPU_INFO_LAST_FAULT: uapi.vgpu_info_last_fault,
    uapi.VGPU_INFO_JOB_COUNTERS: uapi.vgpu_info_job_counters,
}
_INFO_U64 = {uapi.AMDGPU_INFO_TIMESTAMP, uapi.AMDGPU_INFO_VRAM_USAGE, uapi.AMDGPU_INFO_GTT_USAGE,
             uapi.AMDGPU_INFO_VIS_VRAM_USAGE, uapi.AMDGPU_INFO_NUM_BYTES_MOVED,
             uapi.AMDGPU_INFO_NUM_EVICTIONS, uapi.AMDGPU_INFO_NUM_VRAM_CPU_PAGE_FAULTS}
_INFO_U32 = {uapi.AMDGPU_INFO_ACCEL_WORKING, uapi.AMDGPU_INFO_HW_IP_COUNT,
             uapi.AMDGPU_INFO_SENSOR, uapi.AMDGPU_INFO_VRAM_LOST_COUNTER,
             uapi.AMDGPU_INFO_RAS_ENABLED_FEATURES}


def _req_info(s, extra):
    q = s.query
    parts = [f"query={name_of(q, INFO_QUERIES)}", f"return_size={s.return_size}"]
    if q in (uapi.AMDGPU_INFO_HW_IP_INFO, uapi.AMDGPU_INFO_HW_IP_COUNT):
        parts.append(f"ip={name_of(s.query_hw_ip.type, HW_IPS)}")
        if s.query_hw_ip.ip_instance:
            parts.append(f"instance={s.query_hw_ip.ip_instance}")
    elif q == uapi.AMDGPU_INFO_FW_VERSION:
        fw = s.query_fw
        parts += [f"fw_type={name_of(fw.fw_type, FW_TYPES)}", f"ip_instance={fw.ip_instance}",
                  f"index={fw.index}"]
    elif q == uapi.AMDGPU_INFO_SENSOR:
        parts.append(f"sensor={name_of(s.sensor_info.type, SENSORS)}")
    elif q == uapi.AMDGPU_INFO_READ_MMR_REG:
        r = s.read_mmr_reg
        reg = MMR_REGISTERS.get(r.dword_offset)
        parts += [f"dword_offset={r.dword_offset:#x}" + (f" ({reg})" if reg else ""),
                  f"count={r.count}", f"instance={r.instance:#x}"]
    elif q == uapi.VGPU_INFO_JOB_COUNTERS:
        j = uapi.vgpu_info_job_query.from_buffer_copy(bytes(s._u))
        parts += [f"ip={name_of(j.ip_type, HW_IPS)}", f"ring={j.ring}", f"seq={j.seq_no}"]
    elif q == uapi.AMDGPU_INFO_MEMORY or q == uapi.AMDGPU_INFO_DEV_INFO:
        pass
    elif any(bytes(s._u)):
        parts.append(f"args={bytes(s._u).rstrip(bytes(1)).hex()}")
    return _braces(*parts)


def _rep_info(req, s, extra):
    q = req.query
    if not extra:
        return ""
    if q in _INFO_U64 and len(extra) >= 8:
        return _braces(f"value={int.from_bytes(extra[:8], 'little')}")
    if q in _INFO_U32 and len(extra) >= 4:
        return _braces(f"value={int.from_bytes(extra[:4], 'little')}")
    if q == uapi.AMDGPU_INFO_READ_MMR_REG:
        r = req.read_mmr_reg
        values = _u32s(extra, min(r.count, len(extra) // 4))
        return _braces(*(f"{MMR_REGISTERS.get(r.dword_offset + k, hex(r.dword_offset + k))}={v:#010x}"
                         for k, v in enumerate(values)))
    if q == uapi.AMDGPU_INFO_DEV_INFO:
        d = uapi.drm_amdgpu_info_device.from_bytes(extra)
        return _braces(f"{len(extra)} bytes", f"device_id={d.device_id:#x}", f"family={d.family}",
                       f"chip_rev={d.chip_rev}", f"external_rev={d.external_rev:#x}",
                       f"va={d.virtual_address_offset:#x}..{d.virtual_address_max:#x}",
                       f"va_alignment={d.virtual_address_alignment}",
                       f"cu_active_number={d.cu_active_number}")
    if q == uapi.AMDGPU_INFO_MEMORY:
        m = uapi.drm_amdgpu_memory_info.from_bytes(extra)
        return _braces(*(f"{h}={getattr(m, h).heap_usage}/{getattr(m, h).total_heap_size}"
                         for h in ("vram", "cpu_accessible_vram", "gtt")))
    if q in _INFO_ANSWERS:
        return generic(_INFO_ANSWERS[q].from_bytes(extra))
    return _braces(f"{len(extra)} bytes")


def _req_gem_va(s, extra):
    flags = flags_of(s.flags & ~uapi.AMDGPU_VM_MTYPE_MASK, VA_FLAGS)
    mtype = s.flags & uapi.AMDGPU_VM_MTYPE_MASK
    if mtype:
        flags += f"|MTYPE_{MTYPES.get(mtype, hex(mtype))}"
    parts = [f"op={name_of(s.operation, VA_OPS)}"]
    if s.operation != uapi.AMDGPU_VA_OP_CLEAR:
        parts.append(f"handle={s.handle}")
    parts += [f"va={s.va_address:#x}", f"offset={s.offset_in_bo:#x}", f"size={s.map_size}",
              f"flags={flags}"]
    return _braces(*parts)


def _req_wait_cs(s, extra):
    i = s.in_
    return _braces(f"seq={i.handle}", f"ctx={i.ctx_id}", _ip(i.ip_type, i.ip_instance, i.ring),
                   f"timeout={_timeout(i.timeout)}")


def _rep_wait_cs(req, s, extra):
    st = s.out.status
    return _braces(f"status={st} ({'busy' if st else 'signaled'})")


def _req_wait_fences(s, extra):
    i = s.in_
    size = ctypes.sizeof(uapi.drm_amdgpu_fence)
    fences = [uapi.drm_amdgpu_fence.from_bytes(extra[k * size:(k + 1) * size])
              for k in range(i.fence_count)]
    return _braces(_list(f"{{ctx={f.ctx_id} {_ip(f.ip_type, f.ip_instance, f.ring)} "
                         f"seq={f.seq_no}}}" for f in fences),
                   f"wait_all={i.wait_all}", f"timeout={_timeout(i.timeout_ns)}")


def _rep_wait_fences(req, s, extra):
    st = s.out.status  # amdgpu: 1 once satisfied, 0 on timeout (the opposite of WAIT_CS)
    return _braces(f"status={st} ({'signaled' if st else 'busy'})", f"first_signaled={s.out.first_signaled}")


def _req_gem_wait_idle(s, extra):
    return _braces(f"handle={s.in_.handle}", f"timeout={_timeout(s.in_.timeout)}",
                   f"flags={s.in_.flags:#x}" if s.in_.flags else "")


def _rep_gem_wait_idle(req, s, extra):
    st = s.out.status
    return _braces(f"status={st} ({'busy' if st else 'idle'})",
                   f"domain={flags_of(s.out.domain, DOMAINS)}")


def _req_gem_op(s, extra):
    value = (flags_of(s.value, DOMAINS) if s.op == uapi.AMDGPU_GEM_OP_SET_PLACEMENT else "")
    return _braces(f"handle={s.handle}", f"op={name_of(s.op, GEM_OPS)}",
                   f"value={value}" if value else "")


def _rep_gem_op(req, s, extra):
    if req.op == uapi.AMDGPU_GEM_OP_GET_GEM_CREATE_INFO and extra:
        return _req_gem_create(uapi.drm_amdgpu_gem_create.from_bytes(extra), b"")
    return ""


def _req_get_cap(s, extra):
    return _braces(f"capability={name_of(s.capability, DRM_CAPS)}")


def _rep_get_cap(req, s, extra):
    return _braces(f"value={s.value}")


def _req_prime(s, extra):
    return _braces(f"handle={s.handle}", f"flags={flags_of(s.flags, PRIME_FLAGS)}")


def _rep_prime_to_fd(req, s, extra):
    return _braces(f"fd={s.fd} (prime/{s.fd:x})")


def _req_syncobj_create(s, extra):
    return _braces(f"flags={'SIGNALED' if s.flags == uapi.DRM_SYNCOBJ_CREATE_SIGNALED else hex(s.flags)}"
                   if s.flags else "flags=0")


def _handles_points(s, extra, with_points: bool) -> str:
    n = s.count_handles
    handles = _u32s(extra, n)
    if not with_points:
        return f"handles={_list(handles)}"
    points = _u64s(extra[4 * n:], n)
    return f"handles={_list(f'{h}@{p}' for h, p in zip(handles, points))}"


def _req_syncobj_wait(s, extra, points=False):
    return _braces(_handles_points(s, extra, points), f"timeout={_timeout(s.timeout_nsec)}",
                   f"flags={flags_of(s.flags, SYNCOBJ_WAIT_FLAGS)}")


def _rep_syncobj_wait(req, s, extra):
    return _braces(f"first_signaled={s.first_signaled}")


def _req_syncobj_array(s, extra):
    return _braces(_handles_points(s, extra, False))


def _req_syncobj_timeline_array(s, extra, points=True):
    return _braces(_handles_points(s, extra, points),
                   f"flags={s.flags:#x}" if s.flags else "")


def _rep_syncobj_query(req, s, extra):
    return _braces(f"points={_list(_u64s(extra, req.count_handles))}")


def _req_syncobj_handle(s, extra):
    return _braces(f"handle={s.handle}", f"fd={s.fd}", f"flags={s.flags:#x}" if s.flags else "")


def _req_fence_to_handle(s, extra):
    f = s.in_.fence
    return _braces(f"ctx={f.ctx_id} {_ip(f.ip_type, f.ip_instance, f.ring)} seq={f.seq_no}",
                   f"what={name_of(s.in_.what, FENCE_TO_HANDLE)}")


def _handle_only(field: str):
    def fmt(req, s, extra):
        value = s
        for part in field.split("."):
            value = getattr(value, part)
        return _braces(f"{field.split('.')[-1]}={value}")
    return fmt


def _req_handle(s, extra):
    return _braces(f"handle={s.handle}")


def _req_get_client(s, extra):
    return _braces(f"idx={s.idx}")


def _rep_get_client(req, s, extra):
    return _braces(f"auth={s.auth}", f"pid={s.pid}", f"uid={s.uid}")


def _metadata(d, with_data: bool) -> list[str]:
    parts = [f"tiling_info={d.tiling_info:#x}", f"flags={d.flags:#x}", f"data_size_bytes={d.data_size_bytes}"]
    if with_data and d.data_size_bytes:
        n = min(d.data_size_bytes, 256)
        parts.append(f"data={bytes(d.data)[:min(n, 16)].hex()}" + ("..." if n > 16 else ""))
    return parts


def _req_gem_metadata(s, extra):
    parts = [f"handle={s.handle}", f"op={name_of(s.op, METADATA_OPS)}"]
    if s.op == uapi.AMDGPU_GEM_METADATA_OP_SET_METADATA:
        parts += _metadata(s.data, True)
    return _braces(*parts)


def _rep_gem_metadata(req, s, extra):
    if req.op == uapi.AMDGPU_GEM_METADATA_OP_GET_METADATA:
        return _braces(*_metadata(s.data, True))
    return ""


def _req_vm(s, extra):
    return _braces(f"op={name_of(s.in_.op, VM_OPS)}", f"flags={s.in_.flags:#x}" if s.in_.flags else "")


def _req_mmap(s, extra):
    return _braces(f"handle={s.in_.handle}")


def _req_userptr(s, extra):
    return _braces(f"addr={s.addr:#x}", f"size={s.size}", f"flags={flags_of(s.flags, USERPTR_FLAGS)}")


_REQUEST_FMT = {
    "VERSION": _req_version,
    "GET_CLIENT": _req_get_client,
    "GEM_CLOSE": _req_handle,
    "GET_CAP": _req_get_cap,
    "PRIME_HANDLE_TO_FD": _req_prime,
    "PRIME_FD_TO_HANDLE": lambda s, e: _braces(f"fd={s.fd} (prime/{s.fd:x})"),
    "SYNCOBJ_CREATE": _req_syncobj_create,
    "SYNCOBJ_DESTROY": _req_handle,
    "SYNCOBJ_HANDLE_TO_FD": _req_syncobj_handle,
    "SYNCOBJ_FD_TO_HANDLE": _req_syncobj_handle,
    "SYNCOBJ_WAIT": _req_syncobj_wait,
    "SYNCOBJ_TIMELINE_WAIT": lambda s, e: _req_syncobj_wait(s, e, points=True),
    "SYNCOBJ_RESET": _req_syncobj_array,
    "SYNCOBJ_SIGNAL": _req_syncobj_array,
    "SYNCOBJ_QUERY": lambda s, e: _req_syncobj_timeline_array(s, e, points=False),
    "SYNCOBJ_TIMELINE_SIGNAL": _req_syncobj_timeline_array,
    "AMDGPU_GEM_CREATE": _req_gem_create,
    "AMDGPU_GEM_MMAP": _req_mmap,
    "AMDGPU_CTX": _req_ctx,
    "AMDGPU_BO_LIST": _req_bo_list,
    "AMDGPU_CS": _req_cs,
    "AMDGPU_INFO": _req_info,
    "AMDGPU_GEM_WAIT_IDLE": _req_gem_wait_idle,
    "AMDGPU_GEM_VA": _req_gem_va,
    "AMDGPU_WAIT_CS": _req_wait_cs,
    "AMDGPU_GEM_OP": _req_gem_op,
    "AMDGPU_WAIT_FENCES": _req_wait_fences,
    "AMDGPU_FENCE_TO_HANDLE": _req_fence_to_handle,
    "AMDGPU_GEM_METADATA": _req_gem_metadata,
    "AMDGPU_VM": _req_vm,
    "AMDGPU_GEM_USERPTR": _req_userptr,
}

_REPLY_FMT = {
    "VERSION": _rep_version,
    "GET_CLIENT": _rep_get_client,
    "GEM_CLOSE": lambda r, s, e: "",
    "GET_CAP": _rep_get_cap,
    "PRIME_HANDLE_TO_FD": _rep_prime_to_fd,
    "PRIME_FD_TO_HANDLE": _handle_only("handle"),
    "SYNCOBJ_CREATE": _handle_only("handle"),
    "SYNCOBJ_DESTROY": lambda r, s, e: "",
    "SYNCOBJ_HANDLE_TO_FD": lambda r, s, e: _braces(f"fd={s.fd} (sync/{s.fd:x})"),
    "SYNCOBJ_FD_TO_HANDLE": _handle_only("handle"),
    "SYNCOBJ_WAIT": _rep_syncobj_wait,
    "SYNCOBJ_TIMELINE_WAIT": _rep_syncobj_wait,
    "SYNCOBJ_RESET": lambda r, s, e: "",
    "SYNCOBJ_SIGNAL": lambda r, s, e: "",
    "SYNCOBJ_QUERY": _rep_syncobj_query,
    "SYNCOBJ_TIMELINE_SIGNAL": lambda r, s, e: "",
    "SYNCOBJ_TRANSFER": lambda r, s, e: "",
    "AMDGPU_GEM_CREATE": _handle_only("out.handle"),
    "AMDGPU_GEM_MMAP": _rep_gem_mmap,
    "AMDGPU_CTX": _rep_ctx,
    "AMDGPU_BO_LIST": _rep_bo_list,
    "AMDGPU_CS": _rep_cs,
    "AMDGPU_INFO": _rep_info,
    "AMDGPU_GEM_WAIT_IDLE": _rep_gem_wait_idle,
    "AMDGPU_GEM_VA": lambda r, s, e: "",
    "AMDGPU_WAIT_CS": _rep_wait_cs,
    "AMDGPU_GEM_OP": _rep_gem_op,
    "AMDGPU_WAIT_FENCES": _rep_wait_fences,
    "AMDGPU_FENCE_TO_HANDLE": _handle_only("out.handle"),
    "AMDGPU_GEM_METADATA": _rep_gem_metadata,
    "AMDGPU_VM": lambda r, s, e: "",
    "AMDGPU_GEM_USERPTR": _handle_only("handle"),
}


def _side(struct, side: str):
    """The ``in_`` (request) or ``out`` (reply) member of an in/out union."""
    names = [f[0] for f in getattr(type(struct), "_fields_", ())]
    if isinstance(struct, ctypes.Union) and "in_" in names:
        if side == "out" and "out" in names:
            return struct.out
        return struct.in_
    return struct


@dataclass
class DecodedRequest:
    name: str
    struct: object | None
    text: str


def decode_request(frame: bytes, truncated: bool = False) -> DecodedRequest:
    """``NAME {fields}`` of one request frame (whatever its state)."""
    if len(frame) < vframe.REQUEST_HEADER_SIZE:
        return DecodedRequest("?", None, f"<short frame: {len(frame)} bytes>")
    try:
        request, arg, extra = vframe.parse_request(frame, strict=False)
    except vframe.FrameError as e:
        return DecodedRequest("?", None, f"<not a vgpu frame: {e.strerror}>")
    known = uapi.IOCTLS.get(uapi._IOC_NR(request)) \
        if uapi._IOC_TYPE(request) == uapi.DRM_IOCTL_BASE else None
    if known is None:
        arg_size, extra_size = vframe.payload_sizes(frame)
        return DecodedRequest(f"{request:#010x}", None,
                              f"{request:#010x} {{arg_size={arg_size}, extra_size={extra_size}}}")
    return decode_call(request, arg, extra, truncated)


def decode_call(request: int, arg: bytes, extra: bytes, truncated: bool = False) -> DecodedRequest:
    """``NAME {fields}`` of one request: its struct ``arg`` and ``extra``, the data its
    pointers point to laid out as vgpu.pointers.gather lays it out (what the daemon
    read from the caller, or a frame carried inline)."""
    known = uapi.IOCTLS.get(uapi._IOC_NR(request)) \
        if uapi._IOC_TYPE(request) == uapi.DRM_IOCTL_BASE else None
    if known is None:
        return DecodedRequest(f"{request:#010x}", None,
                              f"{request:#010x} {{arg_size={len(arg)}, extra_size={len(extra)}}}")
    struct = known.struct.from_bytes(arg)
    fmt = _REQUEST_FMT.get(known.name)
    try:
        body = fmt(struct, extra) if fmt else generic(_side(struct, "in"))
    except Exception as e:  # a malformed frame must not stop the trace
        body = f"<undecodable: {e}>"
    note = " <truncated>" if truncated else ""
    return DecodedRequest(known.name, struct, f"{known.name} {body}{note}")


def decode_reply(req: DecodedRequest, frame: bytes) -> str:
    """``= 0 {fields}`` of one reply frame to ``req``."""
    try:
        result, arg, extra = vframe.parse_reply(frame, strict=False)
    except vframe.FrameError:
        return f"= ? <short reply: {len(frame)} bytes>"
    if req.struct is None:
        arg_size, extra_size = vframe.payload_sizes(frame)
        return f"= {result} {{arg_size={arg_size}, extra_size={extra_size}}}"
    return f"= {result}" + _reply_body(req, arg, extra)


def _reply_body(req: DecodedRequest, arg: bytes, extra: bytes) -> str:
    struct = type(req.struct).from_bytes(arg)
    fmt = _REPLY_FMT.get(req.name)
    try:
        body = fmt(req.struct, struct, extra) if fmt else generic(_side(struct, "out"))
    except Exception as e:
        body = f"<undecodable: {e}>"
    return f" {body}" if body else ""


def errno_text(err: int) -> str:
    """``-1 EINVAL (Invalid argument)``, as strace prints a failure."""
    return f"-1 {errno.errorcode.get(err, str(err))} ({os.strerror(err)})"


def decode_result(req: DecodedRequest, error: int, reply_arg: bytes | None, reply_extra: bytes = b"") -> str:
    """``= 0 {fields}`` (the reply struct and its out-data) or ``= -1 EINVAL (...)``."""
    if error:
        return f"= {errno_text(error)}"
    if reply_arg is None:
        return "= 0"
    if req.struct is None:
        return f"= 0 {{arg_size={len(reply_arg)}, extra_size={len(reply_extra)}}}"
    return "= 0" + _reply_body(req, reply_arg, reply_extra)


def decode_record(rec: dict) -> str:
    """``NAME {request} = 0 {reply}`` of one ioctl record of the daemon
    (kmd/trace.py Tracer.ioctl: the struct, the pointed-to data it read, the reply)."""
    extra = bytes.fromhex(rec.get("extra", ""))
    req = decode_call(rec["request"], bytes.fromhex(rec.get("arg", "")), extra,
                      truncated=rec.get("extra_size", len(extra)) > len(extra))
    reply_arg = bytes.fromhex(rec["reply_arg"]) if "reply_arg" in rec else None
    return f"{req.text} " + decode_result(req, rec.get("error", 0), reply_arg,
                                          bytes.fromhex(rec.get("reply_extra", "")))
