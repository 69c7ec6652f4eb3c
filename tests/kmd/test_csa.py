"""Context save areas (kmd/csa.py): one kernel BO in VRAM per context, made on first
use, listed by debugfs amdgpu_vm_info (not amdgpu_gem_info: it has no handle), freed with
the context (and with the file)."""
from vgpu import uapi

from kmd import csa
from kmd.hw import compute

from .conftest import call
from .test_ctx import alloc, ctx_args


def test_csa_made_once_in_vram_and_freed_with_the_context(dev, client):
    cid = alloc(dev, client)
    ctx = client.contexts[cid]
    used = dev.memory.vram_allocator.used
    assert ctx.csa is None and f"{csa.CSA_BYTES:12d} byte" not in dev.debugfs_files()["amdgpu_vm_info"]()
    view = csa.csa_for(dev, ctx)
    assert view.size == csa.CSA_BYTES >= compute.csa_bytes(2) and view.flags.writeable
    assert csa.csa_for(dev, ctx) is view
    assert ctx.csa.domain == uapi.AMDGPU_GEM_DOMAIN_VRAM
    assert dev.memory.vram_allocator.used == used + csa.CSA_BYTES
    info = dev.debugfs_files()["amdgpu_vm_info"]()
    assert f"\tDone BOs:\n\t\t0x00000000: {csa.CSA_BYTES:12d} byte VRAM VISIBLE" in info
    assert f"{csa.CSA_BYTES:12d} byte" not in dev.debugfs_files()["amdgpu_gem_info"]()
    dev.check_invariants()
    call(dev, client, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_FREE_CTX, cid))
    assert ctx.csa is None and dev.memory.vram_allocator.used == used
    assert f"{csa.CSA_BYTES:12d} byte" not in dev.debugfs_files()["amdgpu_vm_info"]()
    dev.check_invariants()


def test_csa_freed_when_the_file_closes(dev, client):
    used = dev.memory.vram_allocator.used
    for _ in range(3):
        csa.csa_for(dev, client.contexts[alloc(dev, client)])
    assert dev.memory.vram_allocator.used == used + 3 * csa.CSA_BYTES
    dev.close_file(client)
    assert dev.memory.vram_allocator.used == used
    dev.check_invariants()


def test_csa_counted_to_its_client(dev, client):
    ctx = client.contexts[alloc(dev, client)]
    csa.csa_for(dev, ctx)
    assert ctx.csa.owner_pid == client.pid


def test_a_job_starting_after_its_context_was_freed_makes_no_csa(dev, client):
    # The ring thread asks for the CSA when a job starts; a job of a file closed
    # while it was queued starts after the close: a CSA made then had no owner left
    # to free it (the soak test's leak of one CSA's bytes).
    for close in (lambda cid: call(dev, client, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_FREE_CTX, cid)),
                  lambda cid: dev.close_file(client)):
        cid = alloc(dev, client)
        ctx = client.contexts[cid]
        used = dev.memory.vram_allocator.used
        close(cid)
        assert csa.csa_for(dev, ctx) is None
        assert ctx.csa is None and dev.memory.vram_allocator.used == used
        dev.check_invariants()
