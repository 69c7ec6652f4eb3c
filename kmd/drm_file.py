"""DrmFile: one open of card0/renderD128 (struct drm_file): its handle namespaces
(GEM handles, contexts, syncobjs) and its VM. Handle 0 is never valid (drm-shim's rule).
The handle tables are capped per file and per device (kmd/limits.py): the add_*
methods refuse past a cap, and the tables count themselves into the device's tally."""
import itertools

from .ctx import Context
from .limits import CountedDict, CountedSet, Limiter, Limits
from .perf import ClientUsage
from .vm import VirtualMemory


class DrmFile:
    _ids = itertools.count(1)

    def __init__(self, pid: int, uid: int, comm: str, render: bool, limiter: Limiter | None = None):
        self.id = next(self._ids)
        # The device's limits and totals (a private, unlimited one for a file made alone).
        self.limiter = limiter = limiter or Limiter(Limits(**dict.fromkeys(Limits.names(), 1 << 62)), None)
        tally = limiter.tally
        self.limits_hit: set[str] = set()  # limits this client hit (logged once each)
        self.pid, self.uid, self.comm, self.render = pid, uid, comm, render
        self.node = "renderD128" if render else "card0"
        # drm_ioctl_permit()'s notions, set by kmd/drm_auth.py when the device opens
        # the file (Device.open_file) and by the master ioctls.
        self.authenticated = False
        self.drm_master = None   # its kmd.drm_auth.DrmMaster group (file_priv->master); None: render
        self.is_master = False   # it made that group (file_priv->is_master)
        self.was_master = False  # it has been the device's master (file_priv->was_master)
        self.magic = 0           # GET_MAGIC's answer, 0 until asked
        self.client_caps: dict[str, bool] = {}  # SET_CLIENT_CAP's on/off caps (kmd/kms.py)
        self.bos: dict = CountedDict(tally, "bos")  # GEM handle -> BufferObject
        self.handles_of: dict[int, int] = {}  # id(BufferObject) -> handles to it here
        # The BOs it created VM_ALWAYS_VALID (amdgpu's per-VM BOs): part of every job
        # of this file, listed or not (kmd/cs.py). id(BufferObject) -> BufferObject
        self.per_vm_bos: dict[int, object] = {}
        self.contexts: dict[int, Context] = CountedDict(tally, "contexts")
        self.vm = VirtualMemory()
        self.bo_lists: dict[int, list] = CountedDict(tally, "bo_lists")
        self.syncobjs: dict = CountedDict(tally, "syncobjs")  # syncobj handle -> kmd.syncobj.Syncobj
        self.sync_tokens: set[int] = set()  # tokens this file exported (MOUNT/sync/)
        self.jobs: set[int] = CountedSet(tally, "jobs")  # ids of its jobs in flight
        self.usage = ClientUsage()  # jobs submitted, engine time, faults, hangs (kmd/perf.py)
        # Its last job that failed with a crash dump: the answer to vgpu's
        # VGPU_INFO_LAST_FAULT (uapi.vgpu_info_last_fault), None until one fails.
        self.last_fault = None
        self.userqs: dict = {}   # user queue id -> kmd.userq.UserQueue
        self.seq64 = None        # kmd.userq_sync.Seq64, made by the first USERQ_WAIT that needs it
        self._next_handle = 1
        self._next_ctx = 1
        self._next_list = 1
        self._next_syncobj = 1
        self.closed = False
        self.unplugged = False   # its device was removed from the bus: every ioctl ENODEV (kmd/pci_hotplug.py)

    @property
    def master(self) -> bool:
        """The current DRM master of its device (drm_is_current_master)."""
        return self.is_master and self.drm_master is not None and self.drm_master.current

    def add_bo(self, bo) -> int:
        """A new handle to `bo`. ENOSPC past the per-file cap (the device's BO cap is
        checked when a BO is created, Device.create_bo)."""
        self.limiter.check(self, "bos", device=False)
        handle = self._next_handle
        self._next_handle += 1
        self.bos[handle] = bo
        self.handles_of[id(bo)] = self.handles_of.get(id(bo), 0) + 1
        bo.handle_count += 1
        return handle

    def remove_bo(self, handle: int):
        """Drop a handle; returns (bo, True if it was this file's last handle to it)."""
        bo = self.bos.pop(handle)
        left = self.handles_of[id(bo)] - 1
        if left:
            self.handles_of[id(bo)] = left
        else:
            del self.handles_of[id(bo)]
        bo.handle_count -= 1
        return bo, left == 0

    def add_ctx(self, priority: int, reset_counter: int) -> Context:
        """ENOSPC past the per-file cap, ENOMEM past the device's."""
        self.limiter.check(self, "contexts")
        ctx = Context(self._next_ctx, priority, reset_counter)
        self._next_ctx += 1
        self.contexts[ctx.id] = ctx
        return ctx

    def add_bo_list(self, bos: list) -> int:
        """ENOSPC past the per-file cap, ENOMEM past the device's."""
        self.limiter.check(self, "bo_lists")
        handle = self._next_list
        self._next_list += 1
        self.bo_lists[handle] = bos
        return handle

    def add_syncobj(self, syncobj) -> int:
        """ENOSPC past the per-file cap, ENOMEM past the device's."""
        self.limiter.check(self, "syncobjs")
        handle = self._next_syncobj
        self._next_syncobj += 1
        self.syncobjs[handle] = syncobj
        return handle

    def mapped_bos(self) -> list:
        """BOs mapped in the VM: what a job without a BO list may touch."""
        return self.vm.bos()

    def describe(self) -> str:
        return f"pid {self.pid} ({self.comm}) uid {self.uid} {self.node}"
