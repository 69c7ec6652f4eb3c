"""What libdrm 2.4.114 and Mesa's amdgpu winsys ask at start-up, answered as amdgpu
3.x does, through the dispatch: VERSION's name, DEV_INFO as an Arcturus (MI100,
compute only), INFO READ_MMR_REG (soc15's whitelist) and GDS_CONFIG, GET_CLIENT,
GEM_METADATA, CTX GET/SET_STABLE_PSTATE, GEM_CREATE in GDS/GWS/OA, DRM_AMDGPU_VM;
and every errno path of each."""
import ctypes
import errno
import threading
import time

import pytest

from kmd import info as kinfo
from kmd import onchip
from vgpu import uapi
from vgpu.pm4 import Pm4Ib

from .conftest import call, fails, gem_create, gem_va, info
from .test_devcoredump import c  # noqa: F401  (fixture: a client with code and data BOs)
from .test_cs import Setup, chunk

GDS, GWS, OA = uapi.AMDGPU_GEM_DOMAIN_GDS, uapi.AMDGPU_GEM_DOMAIN_GWS, uapi.AMDGPU_GEM_DOMAIN_OA
BROADCAST = 0xFFFFFFFF


def mmr_args(offset, count=1, instance=BROADCAST):
    a = uapi.drm_amdgpu_info()
    a.query, a.return_size = uapi.AMDGPU_INFO_READ_MMR_REG, 4 * max(count, 1)
    a.read_mmr_reg.dword_offset, a.read_mmr_reg.count, a.read_mmr_reg.instance = offset, count, instance
    return a


def read_mmr(dev, f, offset, count=1, instance=BROADCAST) -> list[int]:
    data = call(dev, f, "AMDGPU_INFO", mmr_args(offset, count, instance))[1]
    return [int.from_bytes(data[i:i + 4], "little") for i in range(0, 4 * count, 4)]


def dev_info(dev, f) -> uapi.drm_amdgpu_info_device:
    return uapi.drm_amdgpu_info_device.from_buffer_copy(
        info(dev, f, uapi.AMDGPU_INFO_DEV_INFO, ctypes.sizeof(uapi.drm_amdgpu_info_device)))


# -- VERSION, DEV_INFO -------------------------------------------------------------------

def test_version_names_the_driver_amdgpu(dev, client):
    v = uapi.drm_version(name_len=64, date_len=64, desc_len=128)
    out, extra = call(dev, client, "VERSION", v)
    assert (out.version_major, out.version_minor) == (3, 49)
    assert extra[:out.name_len] == b"amdgpu"
    assert b"vgpu" in extra[128:128 + out.desc_len]


def test_dev_info_is_a_compute_only_arcturus(dev, client):
    d = dev_info(dev, client)
    assert d.family == uapi.AMDGPU_FAMILY_AI
    assert d.device_id == 0x738C                               # MI100
    # libdrm's asic_is_gfx_pipe_removed / Mesa's ARCTURUS range: compute only
    assert d.external_rev - d.chip_rev == 0x32 and 0x32 <= d.external_rev < 0x3C
    assert d.pci_rev == kinfo.PCI_REVISION


def test_dev_info_is_consistent(dev, client):
    d = dev_info(dev, client)
    cus = sum(bin(d.cu_bitmap[se][sh]).count("1") for se in range(4) for sh in range(4))
    assert cus == d.cu_active_number == d.num_shader_engines * d.num_shader_arrays_per_engine * d.num_cu_per_sh
    assert d.cu_ao_mask == d.cu_bitmap[0][0] == d.cu_ao_bitmap[0][0]
    assert bin(d.enabled_rb_pipes_mask).count("1") == d.num_rb_pipes
    assert d.wave_front_size == 32 and d.num_shader_visible_vgprs == 128     # vISA's
    assert d.virtual_address_alignment == 4096 and 0 < d.virtual_address_offset < d.virtual_address_max
    assert d.high_va_offset == d.high_va_max == 0
    assert d.ce_ram_size == 0                                  # no GFX, no constant engine


# -- INFO READ_MMR_REG ---------------------------------------------------------------------

def test_gb_addr_config_as_libdrm_reads_it(dev, client):
    """amdgpu_query_gpu_info_init: dword_offset 0x263e, count 1, instance 0xffffffff."""
    value, = read_mmr(dev, client, 0x263E)
    assert value == 0x22014042                                 # gfx_v9_0.c, GC 9.4.1
    d = dev_info(dev, client)
    assert 1 << (value >> 19 & 3) == d.num_shader_engines      # NUM_SHADER_ENGINES
    assert 1 << (value >> 26 & 3) == d.num_rb_pipes // d.num_shader_engines   # NUM_RB_PER_SE
    assert 1 << (value & 7) == 4                               # NUM_PIPES


def test_every_whitelisted_register_reads(dev, client):
    for offset in kinfo.READABLE_REGISTERS:
        read_mmr(dev, client, offset)
    # consecutive whitelisted registers in one query (GRBM_STATUS_SE0, _SE1)
    assert read_mmr(dev, client, 0x2005, count=2) == [0, 0]
    # an SE / SH index in range, or one of them broadcast
    read_mmr(dev, client, 0x263E, instance=0x0000)
    read_mmr(dev, client, 0x263E, instance=0x0103)
    read_mmr(dev, client, 0x263E, instance=0xFF01)


def test_idle_status_registers(dev, client):
    assert read_mmr(dev, client, kinfo.mmGRBM_STATUS) == [0]
    assert read_mmr(dev, client, kinfo.mmCP_STAT) == [0]
    assert read_mmr(dev, client, kinfo.mmSDMA0_STATUS_REG) == [1]     # IDLE
    assert read_mmr(dev, client, kinfo.mmSDMA1_STATUS_REG) == [1]


def test_sdma_status_shows_a_running_job(dev, client):
    s = Setup(dev, client)
    s.bo(s.a).write(0, bytes(4))
    from kmd.hw import SdmaIb
    seq = s.submit(SdmaIb().poll_regmem(0x20000000, 1), ring=1)
    deadline = time.monotonic() + 5
    while dev.rings[(uapi.AMDGPU_HW_IP_DMA, 1)].running is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert read_mmr(dev, client, kinfo.mmSDMA1_STATUS_REG) == [0]     # busy
    assert read_mmr(dev, client, kinfo.mmSDMA0_STATUS_REG) == [1]
    assert read_mmr(dev, client, kinfo.mmGRBM_STATUS2) == [kinfo.GRBM_STATUS2_UTCL2_BUSY | kinfo.GRBM_STATUS2_EA_BUSY]
    assert read_mmr(dev, client, kinfo.mmGRBM_STATUS) == [0]          # no graphics or CP work
    s.bo(s.a).write(0, (1).to_bytes(4, "little"))
    assert s.wait(seq, ring=1) == 0
    assert read_mmr(dev, client, kinfo.mmSDMA1_STATUS_REG) == [1]


def test_status_registers_show_a_running_compute_job(dev, c):
    """What radeontop reads: the blocks a compute job keeps busy (CP, SPI, TA; CPF,
    CPC, TC and the memory path), and never a graphics block."""
    from .test_perf import dispatch
    seq = dispatch(c, ".kernel k\nspin:\ns_branch spin\n", [0, 0])
    ring = dev.rings[(uapi.AMDGPU_HW_IP_COMPUTE, 0)]
    deadline = time.monotonic() + 5
    while ring.running is None and time.monotonic() < deadline:
        time.sleep(0.005)
    grbm, grbm2 = read_mmr(dev, c.f, kinfo.mmGRBM_STATUS)[0], read_mmr(dev, c.f, kinfo.mmGRBM_STATUS2)[0]
    se0 = read_mmr(dev, c.f, kinfo.mmGRBM_STATUS_SE0)[0]
    cp = read_mmr(dev, c.f, kinfo.mmCP_STAT)[0]
    assert c.wait(seq) == errno.ETIME            # the ring timeout (1 s) ends the spin
    for bit in (31, 29, 22, 14):                 # GUI_ACTIVE, CP, SPI, TA
        assert grbm >> bit & 1, hex(grbm)
    for bit in (17, 19, 20, 24, 25, 26, 30):     # VGT, IA, SX, SC, PA, DB, CB: graphics
        assert not grbm >> bit & 1, hex(grbm)
    assert grbm2 == kinfo.COMPUTE_GRBM_STATUS2 and grbm2 >> 29 & 1   # CPC_BUSY
    assert se0 == kinfo.COMPUTE_GRBM_STATUS_SE and cp == kinfo.CP_STAT_CP_BUSY
    assert read_mmr(dev, c.f, kinfo.mmGRBM_STATUS) == [0]


def test_read_mmr_reg_count_zero_reads_nothing(dev, client):
    assert call(dev, client, "AMDGPU_INFO", mmr_args(0x263E, count=0))[1] == b""   # min(return_size, 0 registers): nothing copied


@pytest.mark.parametrize("offset,count,instance,err", [
    (0x263E, 1, 0x04, errno.EINVAL),            # SE index 4 (AMDGPU_GFX_MAX_SE)
    (0x263E, 1, 0x0200, errno.EINVAL),          # SH index 2 (AMDGPU_GFX_MAX_SH_PER_SE)
    (0x263E, 129, BROADCAST, errno.EINVAL),     # more than 128 registers
    (0x263D, 1, BROADCAST, errno.EFAULT),       # CC_RB_BACKEND_DISABLE: pre-AI families only
    (0x2644, 32, BROADCAST, errno.EFAULT),      # GB_TILE_MODE0..31: pre-AI families only
    (0xA0D4, 1, BROADCAST, errno.EFAULT),       # PA_SC_RASTER_CONFIG
    (0x263E, 2, BROADCAST, errno.EFAULT),       # GB_ADDR_CONFIG then one off the list
])
def test_read_mmr_reg_refused(dev, client, offset, count, instance, err):
    e = fails(err, dev, client, "AMDGPU_INFO", mmr_args(offset, count, instance))
    if err == errno.EFAULT:
        assert "unallowed offset" in e.reason


def test_gds_config(dev, client):
    g = uapi.drm_amdgpu_info_gds.from_buffer_copy(
        info(dev, client, uapi.AMDGPU_INFO_GDS_CONFIG, ctypes.sizeof(uapi.drm_amdgpu_info_gds)))
    assert (g.gds_total_size, g.compute_partition_size) == (0x1000, 0x1000)
    assert (g.gws_per_compute_partition, g.oa_per_compute_partition) == (64, 16)
    assert g.gds_gfx_partition_size == g.gws_per_gfx_partition == g.oa_per_gfx_partition == 0


# -- GET_CLIENT ----------------------------------------------------------------------------

def test_get_client_on_card0(dev, root_client):
    user_card = dev.open_file(pid=4242, uid=1000, comm="card", render=False)
    out, _ = call(dev, user_card, "GET_CLIENT", uapi.drm_client(idx=0))
    # root_client is the master: another user's card0 file is not authenticated...
    assert (out.idx, out.auth, out.pid, out.uid, out.magic, out.iocs) == (0, 0, 4242, 65534, 0, 0)
    magic = call(dev, user_card, "GET_MAGIC", uapi.drm_auth())[0].magic
    call(dev, root_client, "AUTH_MAGIC", uapi.drm_auth(magic=magic))
    # ...until the master authenticates its magic (drmAuthMagic)
    assert call(dev, user_card, "GET_CLIENT", uapi.drm_client(idx=0))[0].auth == 1
    fails(errno.EINVAL, dev, user_card, "GET_CLIENT", uapi.drm_client(idx=1))
    fails(errno.EINVAL, dev, user_card, "GET_CLIENT", uapi.drm_client(idx=-1))
    dev.close_file(user_card)


def test_get_client_is_refused_on_the_render_node(dev, client):
    e = fails(errno.EACCES, dev, client, "GET_CLIENT", uapi.drm_client(idx=0))
    assert "DRM_RENDER_ALLOW" in e.reason


# -- GEM_METADATA --------------------------------------------------------------------------

def metadata(handle, op, tiling=0, flags=0, data=b"", size=None):
    a = uapi.drm_amdgpu_gem_metadata(handle=handle, op=op)
    a.data.tiling_info, a.data.flags = tiling, flags
    a.data.data_size_bytes = len(data) if size is None else size
    ctypes.memmove(ctypes.addressof(a.data.data), data, min(len(data), 256))
    return a


def get_metadata(dev, f, h, prefill=b""):
    return call(dev, f, "AMDGPU_GEM_METADATA", metadata(h, uapi.AMDGPU_GEM_METADATA_OP_GET_METADATA,
                                                         data=prefill, size=0))[0]


def test_metadata_set_and_get(dev, client):
    h = gem_create(dev, client, 4096)
    out = get_metadata(dev, client, h)
    assert (out.data.tiling_info, out.data.flags, out.data.data_size_bytes) == (0, 0, 0)
    blob = bytes(range(1, 65)) * 4                             # 256 bytes: the whole 64 dwords
    call(dev, client, "AMDGPU_GEM_METADATA",
         metadata(h, uapi.AMDGPU_GEM_METADATA_OP_SET_METADATA, tiling=(1 << 63) | 0x19, flags=7, data=blob))
    out = get_metadata(dev, client, h)
    assert out.data.tiling_info == (1 << 63) | 0x19 and out.data.flags == 7
    assert out.data.data_size_bytes == 256 and bytes(out.data.data) == blob
    # a shorter blob: the rest of data comes back as the caller sent it
    call(dev, client, "AMDGPU_GEM_METADATA",
         metadata(h, uapi.AMDGPU_GEM_METADATA_OP_SET_METADATA, tiling=5, flags=9, data=b"\xaa" * 8))
    out = get_metadata(dev, client, h, prefill=b"\x55" * 16)
    assert out.data.data_size_bytes == 8 and bytes(out.data.data)[:16] == b"\xaa" * 8 + b"\x55" * 8
    assert (out.data.tiling_info, out.data.flags) == (5, 9)
    # 0 bytes drops the blob and keeps the flags (amdgpu_bo_set_metadata)
    call(dev, client, "AMDGPU_GEM_METADATA",
         metadata(h, uapi.AMDGPU_GEM_METADATA_OP_SET_METADATA, tiling=6, flags=1))
    out = get_metadata(dev, client, h)
    assert (out.data.data_size_bytes, out.data.flags, out.data.tiling_info) == (0, 9, 6)


def test_metadata_is_the_bos_not_the_handles(dev, client):
    """It is kept on the BO (amdgpu_bo_user), so every handle to it sees it."""
    h = gem_create(dev, client, 4096)
    call(dev, client, "AMDGPU_GEM_METADATA",
         metadata(h, uapi.AMDGPU_GEM_METADATA_OP_SET_METADATA, tiling=3, data=b"umd!"))
    bo = client.bos[h]
    assert bo.tiling_flags == 3 and bo.metadata == b"umd!"


def test_metadata_refused(dev, client):
    h = gem_create(dev, client, 4096)
    fails(errno.ENOENT, dev, client, "AMDGPU_GEM_METADATA", metadata(99, uapi.AMDGPU_GEM_METADATA_OP_GET_METADATA))
    fails(errno.ENOENT, dev, client, "AMDGPU_GEM_METADATA", metadata(0, uapi.AMDGPU_GEM_METADATA_OP_SET_METADATA))
    fails(errno.EINVAL, dev, client, "AMDGPU_GEM_METADATA",
          metadata(h, uapi.AMDGPU_GEM_METADATA_OP_SET_METADATA, size=257))
    # Linux's quirk: an unknown op does nothing and succeeds
    out, _ = call(dev, client, "AMDGPU_GEM_METADATA", metadata(h, 3, tiling=9))
    assert client.bos[h].tiling_flags == 0


# -- CTX GET/SET_STABLE_PSTATE ------------------------------------------------------------

def ctx_alloc(dev, f) -> int:
    a = uapi.drm_amdgpu_ctx()
    a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
    return call(dev, f, "AMDGPU_CTX", a)[0].out.alloc.ctx_id


def pstate(dev, f, ctx_id, op, flags=0):
    a = uapi.drm_amdgpu_ctx()
    a.in_.op, a.in_.ctx_id, a.in_.flags = op, ctx_id, flags
    return call(dev, f, "AMDGPU_CTX", a)[0]


def get_pstate(dev, f, ctx_id) -> int:
    return pstate(dev, f, ctx_id, uapi.AMDGPU_CTX_OP_GET_STABLE_PSTATE).out.pstate.flags


def test_stable_pstate_set_get_and_release(dev, client, root_client):
    GET, SET = uapi.AMDGPU_CTX_OP_GET_STABLE_PSTATE, uapi.AMDGPU_CTX_OP_SET_STABLE_PSTATE
    a, b = ctx_alloc(dev, client), ctx_alloc(dev, client)
    other = ctx_alloc(dev, root_client)
    assert get_pstate(dev, client, a) == uapi.AMDGPU_CTX_STABLE_PSTATE_NONE
    pstate(dev, client, a, SET, uapi.AMDGPU_CTX_STABLE_PSTATE_PEAK)
    # the level is the device's: every context of every file sees it
    assert get_pstate(dev, client, b) == get_pstate(dev, root_client, other) == uapi.AMDGPU_CTX_STABLE_PSTATE_PEAK
    # another context may not change it (amdgpu_ctx_set_stable_pstate: EBUSY) ...
    fails(errno.EBUSY, dev, client, "AMDGPU_CTX", uapi.drm_amdgpu_ctx(
        in_=uapi.drm_amdgpu_ctx_in(op=SET, ctx_id=b, flags=uapi.AMDGPU_CTX_STABLE_PSTATE_STANDARD)))
    # ... the owner may, and NONE lets go of it
    pstate(dev, client, a, SET, uapi.AMDGPU_CTX_STABLE_PSTATE_MIN_SCLK)
    pstate(dev, client, a, SET, uapi.AMDGPU_CTX_STABLE_PSTATE_NONE)
    pstate(dev, client, b, SET, uapi.AMDGPU_CTX_STABLE_PSTATE_MIN_MCLK)
    # freeing the owner puts back the level it found (NONE, when b was made)
    free = uapi.drm_amdgpu_ctx(in_=uapi.drm_amdgpu_ctx_in(op=uapi.AMDGPU_CTX_OP_FREE_CTX, ctx_id=b))
    call(dev, client, "AMDGPU_CTX", free)
    assert get_pstate(dev, client, a) == uapi.AMDGPU_CTX_STABLE_PSTATE_NONE
    # closing a file frees its contexts the same way
    pstate(dev, root_client, other, SET, uapi.AMDGPU_CTX_STABLE_PSTATE_STANDARD)
    dev.close_file(root_client)
    assert get_pstate(dev, client, a) == uapi.AMDGPU_CTX_STABLE_PSTATE_NONE
    pstate(dev, client, a, SET, uapi.AMDGPU_CTX_STABLE_PSTATE_PEAK)
    assert dev.pstate.owner is client.contexts[a]


@pytest.mark.parametrize("op,ctx_ok,flags", [
    (uapi.AMDGPU_CTX_OP_GET_STABLE_PSTATE, True, 1),        # GET takes no flags
    (uapi.AMDGPU_CTX_OP_SET_STABLE_PSTATE, True, 0x10),     # outside STABLE_PSTATE_FLAGS_MASK
    (uapi.AMDGPU_CTX_OP_SET_STABLE_PSTATE, True, 5),        # past PEAK
    (uapi.AMDGPU_CTX_OP_GET_STABLE_PSTATE, False, 0),       # unknown context: EINVAL, not ENOENT
    (uapi.AMDGPU_CTX_OP_SET_STABLE_PSTATE, False, 1),
    (7, True, 0),                                           # unknown op
])
def test_stable_pstate_refused(dev, client, op, ctx_ok, flags):
    ctx = ctx_alloc(dev, client) if ctx_ok else 77
    a = uapi.drm_amdgpu_ctx(in_=uapi.drm_amdgpu_ctx_in(op=op, ctx_id=ctx, flags=flags))
    fails(errno.EINVAL, dev, client, "AMDGPU_CTX", a)
    assert dev.pstate.level == uapi.AMDGPU_CTX_STABLE_PSTATE_NONE


# -- GEM_CREATE in GDS, GWS, OA ------------------------------------------------------------

def create(dev, f, size, domains, flags=0, alignment=0):
    a = uapi.drm_amdgpu_gem_create()
    a.in_.bo_size, a.in_.alignment, a.in_.domains, a.in_.domain_flags = size, alignment, domains, flags
    return call(dev, f, "AMDGPU_GEM_CREATE", a)[0].out.handle


def test_on_chip_bos_are_accounted_in_their_heaps(dev, client):
    heaps = dev.memory.onchip.heaps
    g = create(dev, client, 1001, GDS, alignment=2)           # rounded up to 4 bytes, alignment 4
    # amdgpu_bo_create: one page per unit, so the GEM object is 1004 pages
    assert client.bos[g].size == 1004 << 12 and client.bos[g].domain == GDS and heaps[GDS].used == 1004
    w = create(dev, client, 3, GWS)
    o = create(dev, client, 16, OA)
    assert (heaps[GWS].used, heaps[OA].used) == (3, 16)
    assert (client.bos[w].size, client.bos[o].size) == (3 << 12, 16 << 12)
    assert client.bos[w].where == "gws@0x0" and client.bos[g].where == "gds@0x0"
    assert dev.memory.vram_allocator.used == 0 and dev.memory.gtt_used == 0 and dev.memory.bo_count == 0
    # they are NO_CPU_ACCESS, as amdgpu_gem_create_ioctl makes them
    info = call(dev, client, "AMDGPU_GEM_OP", uapi.drm_amdgpu_gem_op(
        handle=g, op=uapi.AMDGPU_GEM_OP_GET_GEM_CREATE_INFO))[1]
    created = uapi.drm_amdgpu_gem_create_in.from_buffer_copy(info)
    assert created.domain_flags & uapi.AMDGPU_GEM_CREATE_NO_CPU_ACCESS
    # amdgpu_gem_op_ioctl: bo_size is the object's size, alignment page_alignment << PAGE_SHIFT
    assert (created.bo_size, created.alignment, created.domains) == (1004 << 12, 4 << 12, GDS)
    dev.check_invariants()
    for h in (g, w, o):
        call(dev, client, "GEM_CLOSE", uapi.drm_gem_close(handle=h))
    assert heaps[GDS].used == heaps[GWS].used == heaps[OA].used == 0


def test_on_chip_heaps_fill_up(dev, client):
    create(dev, client, 0x1000, GDS)
    fails(errno.ENOMEM, dev, client, "AMDGPU_GEM_CREATE", uapi.drm_amdgpu_gem_create(
        in_=uapi.drm_amdgpu_gem_create_in(bo_size=4, domains=GDS)))
    assert "out of memory" in dev.kmsg.text() and "GDS" in dev.kmsg.text()
    # GDS|GWS: GDS is full, so the BO goes to GWS (amdgpu's placement order)
    h = create(dev, client, 8, GDS | GWS)
    assert client.bos[h].domain == GWS
    create(dev, client, 8, OA)
    create(dev, client, 8, OA)
    fails(errno.ENOMEM, dev, client, "AMDGPU_GEM_CREATE", uapi.drm_amdgpu_gem_create(
        in_=uapi.drm_amdgpu_gem_create_in(bo_size=1, domains=OA)))


def test_on_chip_bos_cannot_be_cpu_mapped(dev, client):
    h = create(dev, client, 4096, GDS)
    e = fails(errno.EPERM, dev, client, "AMDGPU_GEM_MMAP", uapi.drm_amdgpu_gem_mmap(
        in_=uapi.drm_amdgpu_gem_mmap_in(handle=h)))
    assert "NO_CPU_ACCESS" in e.reason
    assert client.bos[h].mmap_offset not in dev.bos_by_offset


def test_gds_bo_is_va_mapped_as_libdrm_rounds_it(dev, client):
    """IGT's amdgpu test: a GDS BO of 1024 bytes is VA-mapped with the page libdrm's
    amdgpu_bo_va_op rounds the size to. The BO is 1024 pages (amdgpu_bo_create), so
    the page fits; past the BO's 1024 pages is EINVAL as for any BO. The mapping has
    no valid PTEs: GDS is reached through GDS instructions, never through the VM."""
    h = create(dev, client, 1024, GDS)
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, 0x400000, 4096))
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, 0x800000, 1024 << 12))
    fails(errno.EINVAL, dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, 0x2000000, 4096, offset=1024 << 12))
    bo = client.bos[h]
    assert client.vm.maps_bo(bo) and client.vm.page_table.translate(0x400000) == (None, 0)
    assert client.vm.page_table.mapped_pages() == 0
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, 0x400000, 4096, op=uapi.AMDGPU_VA_OP_UNMAP))
    w = create(dev, client, 2, GWS)                            # GWS and OA alike: a page per entry
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, w, 0x1000000, 2 << 12))
    call(dev, client, "GEM_CLOSE", uapi.drm_gem_close(handle=h))
    assert not client.vm.maps_bo(bo)


def test_on_chip_bo_in_a_bo_list_and_a_cs(dev, client):
    """A GDS BO travels in the BO list (the only way Linux allows); the job runs and
    the BO outlives its handle until the job is done."""
    s = Setup(dev, client)
    g = create(dev, client, 256, GDS)
    lst = s.bo_list([s.ib, s.a, g])
    from kmd.hw import SdmaIb
    s.list = lst
    seq = s.submit(SdmaIb().constant_fill(0x20000000, 0x1234, 64))
    assert s.wait(seq) == 0
    call(dev, client, "GEM_CLOSE", uapi.drm_gem_close(handle=g))
    dev.check_invariants()
    # a user fence cannot live in one
    g2 = create(dev, client, 256, GDS)
    c = uapi.drm_amdgpu_cs_chunk_ib(va_start=0x10000000, ib_bytes=4, ip_type=uapi.AMDGPU_HW_IP_DMA)
    s.bo(s.ib).write(0, SdmaIb().nop().tobytes())
    chunks = chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c)) + chunk(
        uapi.AMDGPU_CHUNK_ID_FENCE, bytes(uapi.drm_amdgpu_cs_chunk_fence(handle=g2, offset=0)))
    a = uapi.drm_amdgpu_cs(in_=uapi.drm_amdgpu_cs_in(ctx_id=s.ctx, bo_list_handle=s.list, num_chunks=2))
    fails(errno.EINVAL, dev, client, "AMDGPU_CS", a, chunks)


# -- DRM_AMDGPU_VM ------------------------------------------------------------------------

def vm_op(op, flags=0):
    return uapi.drm_amdgpu_vm(in_=uapi.drm_amdgpu_vm_in(op=op, flags=flags))


RESERVE, UNRESERVE = uapi.AMDGPU_VM_OP_RESERVE_VMID, uapi.AMDGPU_VM_OP_UNRESERVE_VMID


def test_reserve_vmid_one_file_at_a_time(dev, client, root_client):
    call(dev, client, "AMDGPU_VM", vm_op(RESERVE))
    call(dev, client, "AMDGPU_VM", vm_op(RESERVE))              # again: a no-op
    assert dev.reserved_vmid is client
    e = fails(errno.EINVAL, dev, root_client, "AMDGPU_VM", vm_op(RESERVE))
    assert "reserved vmid" in e.reason
    call(dev, root_client, "AMDGPU_VM", vm_op(UNRESERVE))       # not the holder: a no-op
    assert dev.reserved_vmid is client
    call(dev, client, "AMDGPU_VM", vm_op(UNRESERVE))
    assert dev.reserved_vmid is None
    call(dev, root_client, "AMDGPU_VM", vm_op(RESERVE))
    dev.close_file(root_client)                                 # amdgpu_vm_fini gives it back
    call(dev, client, "AMDGPU_VM", vm_op(RESERVE))
    assert dev.reserved_vmid is client


def test_unreserve_waits_for_the_files_jobs(dev, client):
    s = Setup(dev, client)
    call(dev, client, "AMDGPU_VM", vm_op(RESERVE))
    s.bo(s.a).write(0, bytes(4))
    from kmd.hw import SdmaIb
    seq = s.submit(SdmaIb().poll_regmem(0x20000000, 1))
    d = next(d for d in uapi.IOCTLS.values() if d.name == "AMDGPU_VM")
    pending = dev.ioctl(client, d.request, bytes(vm_op(UNRESERVE)))
    assert hasattr(pending, "wait")                             # a PendingReply: write() did not block
    threading.Timer(0.2, lambda: s.bo(s.a).write(0, (1).to_bytes(4, "little"))).start()
    t0 = time.monotonic()
    pending.wait()
    assert 0.1 < time.monotonic() - t0 < 2.0
    assert dev.reserved_vmid is None and s.wait(seq) == 0


@pytest.mark.parametrize("op,flags", [(RESERVE, 1), (UNRESERVE, 1 << 31), (0, 0), (3, 0)])
def test_vm_ioctl_refused(dev, client, op, flags):
    fails(errno.EINVAL, dev, client, "AMDGPU_VM", vm_op(op, flags))
    assert dev.reserved_vmid is None


# -- a compute IB with DMA_DATA through the KMD ------------------------------------------------

def test_dma_data_on_the_compute_ring(dev, client):
    s = Setup(dev, client)
    s.bo(s.a).write(0, bytes(range(256)))
    ib = (Pm4Ib().dma_data(0x30000000, 0x20000000, 256).dma_fill(0x30000100, 0xA5A5A5A5, 64)
          .release_mem(0x30001000, 7))
    s.bo(s.ib).write(0, ib.tobytes())
    c = uapi.drm_amdgpu_cs_chunk_ib(va_start=0x10000000, ib_bytes=len(ib) * 4, ip_type=uapi.AMDGPU_HW_IP_COMPUTE)
    a = uapi.drm_amdgpu_cs(in_=uapi.drm_amdgpu_cs_in(ctx_id=s.ctx, bo_list_handle=s.list, num_chunks=1))
    seq = call(dev, client, "AMDGPU_CS", a, chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c)))[0].out.handle
    w = uapi.drm_amdgpu_wait_cs(in_=uapi.drm_amdgpu_wait_cs_in(
        handle=seq, ip_type=uapi.AMDGPU_HW_IP_COMPUTE, ctx_id=s.ctx, timeout=(1 << 64) - 1))
    assert call(dev, client, "AMDGPU_WAIT_CS", w)[0].out.status == 0
    b = s.bo(s.b)
    assert b.read(0, 256) == bytes(range(256)) and b.read(256, 64) == b"\xa5" * 64
    assert int.from_bytes(b.read(0x1000, 8), "little") == 7


def test_onchip_sizes_are_arcturus():
    assert (onchip.GDS_SIZE, onchip.GWS_SIZE, onchip.OA_SIZE) == (0x1000, 64, 16)
    assert onchip.units(GDS, 5, 1) == (8, 4) and onchip.units(GWS, 5, 0) == (5, 1)
