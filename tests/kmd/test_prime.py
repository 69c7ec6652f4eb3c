"""PRIME_HANDLE_TO_FD / PRIME_FD_TO_HANDLE through the dispatch (kmd/prime.py):
tokens, handles, lifetimes, access of other uids, every errno."""
import errno
import os

import pytest

from kmd.hw import SdmaIb
from vgpu import uapi

from .conftest import MiB, call, fails, gem_create, gem_va
from .test_cs import VA_A, Setup

GTT = uapi.AMDGPU_GEM_DOMAIN_GTT


def export(dev, f, handle, flags=uapi.DRM_CLOEXEC | uapi.DRM_RDWR) -> int:
    out, _ = call(dev, f, "PRIME_HANDLE_TO_FD", uapi.drm_prime_handle(handle=handle, flags=flags))
    return out.fd


def import_(dev, f, token) -> int:
    out, _ = call(dev, f, "PRIME_FD_TO_HANDLE", uapi.drm_prime_handle(fd=token))
    return out.handle


def close(dev, f, handle):
    call(dev, f, "GEM_CLOSE", uapi.drm_gem_close(handle=handle))


@pytest.fixture
def other(dev):
    f = dev.open_file(pid=2000, uid=2000, comm="importer", render=True)
    yield f
    if not f.closed:
        dev.close_file(f)


def test_export_gives_a_31_bit_token_naming_the_bo(dev, client):
    h = gem_create(dev, client, 8192, GTT)
    token = export(dev, client, h)
    assert 0 < token < 1 << 31
    ex = dev.prime_by_token(token)
    assert ex is not None and ex.bo is client.bos[h] and ex.size == 8192
    assert export(dev, client, h) == token  # one export per BO
    assert export(dev, client, h, flags=0) == token


def test_import_in_another_file_is_the_same_bo(dev, client, other):
    h = gem_create(dev, client, 4096, GTT)
    bo = client.bos[h]
    token = export(dev, client, h)
    h2 = import_(dev, other, token)
    assert other.bos[h2] is bo and bo.handle_count == 2
    assert import_(dev, other, token) == h2  # the file's existing handle, no second one
    assert bo.handle_count == 2
    assert import_(dev, client, token) == h  # the exporter gets its own handle back
    bo.write(0, b"shared")
    assert other.bos[h2].read(0, 6) == b"shared"


def test_import_by_another_uid_grants_access_to_the_bo_file(dev, client, other):
    h = gem_create(dev, client, 4096, GTT)
    bo = client.bos[h]
    assert not bo.may_access(other.uid)
    import_(dev, other, export(dev, client, h))
    assert bo.may_access(other.uid) and bo.may_access(0) and bo.may_access(client.uid)
    assert not bo.may_access(4242)
    if os.geteuid() == 0:
        acl = os.getxattr(bo.path, "system.posix_acl_access")
        assert (2000).to_bytes(4, "little") in acl


def test_export_outlives_the_exporters_handle(dev, client, other):
    h = gem_create(dev, client, 4096, GTT)
    bo = client.bos[h]
    bo.write(0, b"kept")
    token = export(dev, client, h)
    close(dev, client, h)
    assert not bo.freed and bo.handle_count == 0  # the export holds it
    dev.check_invariants()
    h2 = import_(dev, other, token)
    assert other.bos[h2] is bo and bo.read(0, 4) == b"kept"
    close(dev, other, h2)
    assert not bo.freed  # the exporter's file still holds the export
    dev.close_file(client)
    assert bo.freed and dev.prime_by_token(token) is None
    assert dev.memory.gtt_used == 0
    fails(errno.ENOENT, dev, other, "PRIME_FD_TO_HANDLE", uapi.drm_prime_handle(fd=token))


def test_an_import_holds_the_export_after_the_exporter_closes(dev, client, other):
    h = gem_create(dev, client, 4096, GTT)
    token = export(dev, client, h)
    h2 = import_(dev, other, token)
    bo = other.bos[h2]
    dev.close_file(client)
    assert dev.prime_by_token(token) is not None and not bo.freed
    third = dev.open_file(pid=3000, uid=3000, comm="third")
    assert third.bos[import_(dev, third, token)] is bo
    close(dev, other, h2)
    assert dev.prime_by_token(token) is not None  # third's import still holds it
    dev.close_file(third)
    assert dev.prime_by_token(token) is None and bo.freed


def test_an_open_prime_file_holds_the_export(dev, client):
    h = gem_create(dev, client, 4096, GTT)
    token = export(dev, client, h)
    ex = dev.prime_by_token(token)
    assert ex.hold()
    close(dev, client, h)
    dev.close_file(client)
    assert dev.prime_by_token(token) is ex and not ex.bo.freed
    assert ex.write(0, b"abc") == 3 and ex.read(0, 3) == b"abc"
    ex.unhold()
    assert dev.prime_by_token(token) is None and ex.bo.freed and not ex.hold()


def test_closing_an_import_keeps_the_exporters_bo(dev, client, other):
    h = gem_create(dev, client, 4096, GTT)
    h2 = import_(dev, other, export(dev, client, h))
    dev.close_file(other)
    assert not client.bos[h].freed and client.bos[h].handle_count == 1


def test_the_gpu_writes_an_imported_bo(dev, client, other):
    s = Setup(dev, other)
    h = gem_create(dev, client, 4096, GTT)
    h2 = import_(dev, other, export(dev, client, h))
    call(dev, other, "AMDGPU_GEM_VA", gem_va(dev, other, h2, VA_A + MiB, 4096))
    seq = s.submit(SdmaIb().constant_fill(VA_A + MiB, 0x5A5A5A5A, 4096))
    assert s.wait(seq) == 0
    assert client.bos[h].read(0, 8) == b"\x5a" * 8


def test_handle_to_fd_errors(dev, client):
    h = gem_create(dev, client, 4096, GTT)
    fails(errno.EINVAL, dev, client, "PRIME_HANDLE_TO_FD", uapi.drm_prime_handle(handle=h, flags=0x4))
    fails(errno.ENOENT, dev, client, "PRIME_HANDLE_TO_FD", uapi.drm_prime_handle(handle=999))
    always = gem_create(dev, client, 4096, GTT, flags=uapi.AMDGPU_GEM_CREATE_VM_ALWAYS_VALID)
    fails(errno.EPERM, dev, client, "PRIME_HANDLE_TO_FD", uapi.drm_prime_handle(handle=always))
    assert "PRIME_HANDLE_TO_FD refused" in dev.kmsg.text()


def test_fd_to_handle_errors(dev, client):
    fails(errno.ENOENT, dev, client, "PRIME_FD_TO_HANDLE", uapi.drm_prime_handle(fd=0x1234))
    fails(errno.ENOENT, dev, client, "PRIME_FD_TO_HANDLE", uapi.drm_prime_handle(fd=-1))
    assert "PRIME_FD_TO_HANDLE refused" in dev.kmsg.text()


def test_prime_file_io_past_the_end(dev, client):
    h = gem_create(dev, client, 4096, GTT)
    ex = dev.prime_by_token(export(dev, client, h))
    assert ex.read(4000, 1000) == bytes(96) and ex.read(5000, 10) == b""
    assert ex.write(4095, b"xy") == 1
    with pytest.raises(Exception) as e:
        ex.write(4096, b"z")
    assert e.value.errno == errno.ENOSPC


def test_both_render_and_card_files_may_share(dev, client, root_client):
    h = gem_create(dev, root_client, 4096, GTT)
    assert client.bos[import_(dev, client, export(dev, root_client, h))] is root_client.bos[h]


def test_gem_info_shows_exports(dev, client):
    h = gem_create(dev, client, 4096, GTT)
    token = export(dev, client, h)
    # amdgpu_bo_print_info's " exported as ino:%lu": the export's token (prime/<token-hex>)
    assert f"\t\t0x{h:08x}:         4096 byte GTT exported as ino:{token}\n" in dev.debugfs_files()["amdgpu_gem_info"]()
