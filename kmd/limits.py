"""Object limits per DRM file and per device (docs/kmd.md, "Limits").

Linux bounds what one client may create by memory (kmalloc fails: ENOMEM) and by the
size of its handle tables (idr_alloc finds no free id: ENOSPC). vgpu keeps both as
explicit numbers, so one client cannot make the device hold more than it can
serve: every BO is a mapping and a file, every object costs the daemon memory, and
everything a file holds is freed when it closes.

- Per file, a handle table that is full answers ENOSPC, as idr_alloc does in
  drm_gem_handle_create_tail (GEM handles), amdgpu_ctx_alloc (contexts: ids
  1..AMDGPU_VM_MAX_NUM_CTX - 1, so at most 4095 per file), drm_syncobj_get_handle
  (syncobjs) and amdgpu_bo_list_ioctl (BO lists). Jobs in flight are not handles:
  past the per-file cap a CS fails with ENOMEM (amdgpu_job_alloc's errno, which Mesa
  retries).
- Per device, an object that would pass the cap answers ENOMEM (the allocation
  fails). The device's BO cap is also bounded by what the BO store allows
  (kmd.shmem.MAX_BOS and vm.max_map_count, docs/memory.md).

Each limit can be changed at mount (`vgpu mount --max-bos N --max-bos-per-file N
...`, one pair per kind). A client that hits a limit gets one kmsg line saying
which limit and the option that raises it; its later refusals are not logged (the
refusal itself is a LimitError, which Device.ioctl does not log again).

Counting: the per-file tables (DrmFile.bos, contexts, syncobjs, bo_lists, jobs) are
CountedDict / CountedSet objects that keep the device-wide totals in one `tally`
up to date however they are changed, so the per-device checks cost O(1).
"""
from __future__ import annotations

import errno
from dataclasses import dataclass, fields

from .errors import KmdError
from .shmem import MAX_BOS


@dataclass(frozen=True)
class Kind:
    attr: str          # the DrmFile table that holds them
    what: str          # how a kmsg line names them
    file_errno: int    # past the per-file cap
    device_errno: int  # past the per-device cap


KINDS = {
    "bos": Kind("bos", "BOs", errno.ENOSPC, errno.ENOMEM),
    "contexts": Kind("contexts", "contexts", errno.ENOSPC, errno.ENOMEM),
    "syncobjs": Kind("syncobjs", "syncobjs", errno.ENOSPC, errno.ENOMEM),
    "bo_lists": Kind("bo_lists", "BO lists", errno.ENOSPC, errno.ENOMEM),
    "jobs": Kind("jobs", "jobs in flight", errno.ENOMEM, errno.ENOMEM),
}


@dataclass
class Limits:
    """The caps, per device and per file. `bos` counts BOs (docs/memory.md: the BO
    store's own bound, 262,144 or less, stays above it); `bos_per_file` counts one
    file's GEM handles."""

    bos: int = MAX_BOS
    bos_per_file: int = 131072
    contexts: int = 65536
    contexts_per_file: int = 4095       # amdgpu: ids 1..AMDGPU_VM_MAX_NUM_CTX - 1
    syncobjs: int = 262144
    syncobjs_per_file: int = 65536
    bo_lists: int = 16384
    bo_lists_per_file: int = 1024
    jobs: int = 4096
    jobs_per_file: int = 1024

    @staticmethod
    def option(name: str) -> str:
        """The mount option of field `name`: bos_per_file -> --max-bos-per-file."""
        return "--max-" + name.replace("_", "-")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def changes(self) -> str:
        """The limits that differ from the defaults, for the kmsg line at start ("" if none)."""
        default = Limits()
        return ", ".join(f"{self.option(n)} {getattr(self, n)} (default {getattr(default, n)})"
                         for n in self.names() if getattr(self, n) != getattr(default, n))


class LimitError(KmdError):
    """A refusal by a limit. Logged once per client by the Limiter, so Device.ioctl
    does not log it again (`quiet`)."""

    quiet = True


class CountedDict(dict):
    """A per-file table that keeps `tally[key]`, a device-wide count of the entries
    of every such table, up to date on every way in or out."""

    __slots__ = ("_tally", "_key")

    def __init__(self, tally: dict, key: str):
        super().__init__()
        self._tally, self._key = tally, key

    def __setitem__(self, k, v):
        if k not in self:
            self._tally[self._key] += 1
        super().__setitem__(k, v)

    def __delitem__(self, k):
        super().__delitem__(k)
        self._tally[self._key] -= 1

    def pop(self, k, *default):
        if k in self:
            self._tally[self._key] -= 1
        return super().pop(k, *default)

    def popitem(self):
        item = super().popitem()
        self._tally[self._key] -= 1
        return item

    def setdefault(self, k, default=None):
        if k not in self:
            self[k] = default
        return self[k]

    def update(self, *args, **kw):
        for k, v in dict(*args, **kw).items():
            self[k] = v

    def clear(self):
        self._tally[self._key] -= len(self)
        super().clear()


class CountedSet(set):
    """A per-file set counted in `tally[key]` as CountedDict is."""

    __slots__ = ("_tally", "_key")

    def __init__(self, tally: dict, key: str):
        super().__init__()
        self._tally, self._key = tally, key

    def add(self, v):
        if v not in self:
            self._tally[self._key] += 1
            super().add(v)

    def discard(self, v):
        if v in self:
            self._tally[self._key] -= 1
            super().discard(v)

    def remove(self, v):
        super().remove(v)
        self._tally[self._key] -= 1

    def pop(self):
        v = super().pop()
        self._tally[self._key] -= 1
        return v

    def clear(self):
        self._tally[self._key] -= len(self)
        super().clear()


class Limiter:
    """The device's limits and its live totals (device lock held for every call)."""

    def __init__(self, limits: Limits, kmsg, bo_count=None, bo_bound=None):
        self.limits = limits
        self.kmsg = kmsg
        self.tally = dict.fromkeys(KINDS, 0)
        # The device's BO total is the BO store's (it counts BOs, not handles), and
        # its own bound (vm.max_map_count) caps the mount option.
        self._bo_count = bo_count
        self._bo_bound = bo_bound

    def device_count(self, kind: str) -> int:
        if kind == "bos" and self._bo_count is not None:
            return self._bo_count()
        return self.tally[kind]

    def device_limit(self, kind: str) -> int:
        limit = getattr(self.limits, kind)
        if kind == "bos" and self._bo_bound is not None:
            limit = min(limit, self._bo_bound())
        return limit

    def check(self, f, kind: str, per_file: bool = True, device: bool = True) -> None:
        """Refuse (LimitError) one more object of `kind` for file `f` past a cap."""
        k = KINDS[kind]
        if per_file:
            cap = getattr(self.limits, kind + "_per_file")
            if len(getattr(f, k.attr)) >= cap:
                self._refuse(f, kind, k.file_errno, f"the per-file limit of {cap} {k.what}",
                             Limits.option(kind + "_per_file"))
        if device:
            cap = self.device_limit(kind)
            if self.device_count(kind) >= cap:
                self._refuse(f, kind, k.device_errno, f"the device's limit of {cap} {k.what}",
                             Limits.option(kind))

    def _refuse(self, f, kind: str, err: int, which: str, option: str):
        seen = f.limits_hit
        if kind not in seen:
            seen.add(kind)
            self.kmsg.log(f"client {f.id} (pid {f.pid}, {f.comm}) reached {which} "
                          f"({errno.errorcode[err]}; vgpu mount {option} N raises it); "
                          f"its further refusals by this limit are not logged")
        raise LimitError(err, f"{which} reached")
