"""CTX: alloc, free, query state, priorities."""
import errno

import pytest

from vgpu import uapi

from .conftest import call, fails


def ctx_args(op, ctx_id=0, priority=0, flags=0):
    a = uapi.drm_amdgpu_ctx()
    a.in_.op, a.in_.ctx_id, a.in_.priority, a.in_.flags = op, ctx_id, priority, flags
    return a


def alloc(dev, f, priority=0):
    out, _ = call(dev, f, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_ALLOC_CTX, priority=priority))
    return out.out.alloc.ctx_id


def test_alloc_query_free(dev, client):
    cid = alloc(dev, client)
    assert cid != 0
    out, _ = call(dev, client, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_QUERY_STATE, cid))
    assert out.out.state.reset_status == uapi.AMDGPU_CTX_NO_RESET
    out, _ = call(dev, client, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_QUERY_STATE2, cid))
    assert out.out.state.flags == 0
    call(dev, client, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_FREE_CTX, cid))
    # amdgpu_ctx_free / amdgpu_ctx_query: an id the file does not hold is EINVAL
    fails(errno.EINVAL, dev, client, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_FREE_CTX, cid))


def query2_flags(dev, f, cid) -> int:
    out, _ = call(dev, f, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_QUERY_STATE2, cid))
    return out.out.state.flags


def reset_status(dev, f, cid) -> tuple[int, int, int]:
    out, _ = call(dev, f, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_QUERY_STATE, cid))
    return out.out.state.reset_status, out.out.state.flags, out.out.state.hangs


def test_guilty_and_innocent_reset_reported(dev, client):
    guilty, innocent = alloc(dev, client), alloc(dev, client)
    client.contexts[guilty].guilty = True
    client.contexts[guilty].hangs = 1
    dev.reset_counter += 1
    assert query2_flags(dev, client, guilty) == (uapi.AMDGPU_CTX_QUERY2_FLAGS_RESET
                                                 | uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY)
    assert query2_flags(dev, client, innocent) == uapi.AMDGPU_CTX_QUERY2_FLAGS_RESET


def test_query_state_reports_a_reset_once_and_never_the_culprit(dev, client):
    """amdgpu_ctx_query: UNKNOWN_RESET when the device was reset since this
    context's last QUERY_STATE (or its creation), then NO_RESET; never GUILTY or
    INNOCENT, flags and hangs 0. IGT's amd_dispatch slow-hang test asserts
    UNKNOWN_RESET for the context whose job hung."""
    guilty, innocent = alloc(dev, client), alloc(dev, client)
    assert reset_status(dev, client, guilty) == (uapi.AMDGPU_CTX_NO_RESET, 0, 0)
    client.contexts[guilty].guilty = True
    client.contexts[guilty].hangs = 1
    dev.reset_counter += 1
    for cid in (guilty, innocent):
        assert reset_status(dev, client, cid) == (uapi.AMDGPU_CTX_UNKNOWN_RESET, 0, 0)
        assert reset_status(dev, client, cid) == (uapi.AMDGPU_CTX_NO_RESET, 0, 0)   # once per reset
    later = alloc(dev, client)        # made after the reset: it saw none
    assert reset_status(dev, client, later) == (uapi.AMDGPU_CTX_NO_RESET, 0, 0)
    # QUERY_STATE2 is not consumed by QUERY_STATE: it still names the culprit
    assert query2_flags(dev, client, guilty) & uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY


def test_priorities(dev, client, root_client):
    alloc(dev, client, uapi.AMDGPU_CTX_PRIORITY_LOW)
    fails(errno.EACCES, dev, client, "AMDGPU_CTX",
          ctx_args(uapi.AMDGPU_CTX_OP_ALLOC_CTX, priority=uapi.AMDGPU_CTX_PRIORITY_HIGH))
    assert alloc(dev, root_client, uapi.AMDGPU_CTX_PRIORITY_HIGH)
    fails(errno.EINVAL, dev, client, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_ALLOC_CTX, priority=7))


@pytest.mark.parametrize("args,err", [
    (dict(op=99, ctx_id=1), errno.EINVAL),
    (dict(op=uapi.AMDGPU_CTX_OP_ALLOC_CTX, flags=1), errno.EINVAL),
    (dict(op=uapi.AMDGPU_CTX_OP_QUERY_STATE, ctx_id=42), errno.EINVAL),
    (dict(op=uapi.AMDGPU_CTX_OP_QUERY_STATE2, ctx_id=0), errno.EINVAL),
])
def test_ctx_errors(dev, client, args, err):
    alloc(dev, client)
    fails(err, dev, client, "AMDGPU_CTX", ctx_args(**args))


def test_contexts_are_per_file(dev, client, root_client):
    cid = alloc(dev, client)
    if cid not in root_client.contexts:
        fails(errno.EINVAL, dev, root_client, "AMDGPU_CTX", ctx_args(uapi.AMDGPU_CTX_OP_QUERY_STATE, cid))
