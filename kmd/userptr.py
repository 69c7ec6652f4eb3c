"""GEM_USERPTR: a BO whose bytes are the caller's own memory (amdgpu_gem_userptr_ioctl).

On Linux the driver pins the process's pages (get_user_pages, HMM) and the GPU reads
and writes them in place. vgpu's engines run in the daemon, another process, and
reach memory only through its VRAM/GTT apertures (docs/memory.md). So a userptr BO
is a GTT BO whose aperture pages hold a copy of the user's range, kept coherent at
**job boundaries** (docs/kmd.md, "GEM_USERPTR"):

- before a job that may touch it runs (its BO list names it, or its file has it
  mapped in its VM), the ring copies the range in from the owning process, unless
  another job that uses it is running already (then the copy is live);
- after the job, the ring writes back to the process the bytes the job changed,
  compared with the copy taken at the start, so bytes the CPU wrote meanwhile and the
  job did not are kept. READONLY BOs are never written back, and GEM_VA never gives
  their pages WRITEABLE (amdgpu_vm_bo_update), so a GPU write to one is a page fault.

Unlike a shared-memory BO, a CPU store to the range while a job runs may not be seen
by that job, and the job's stores reach the process when it ends, before its fence
signals. GEM_MMAP of a userptr BO is EPERM (as in Linux: the CPU already has it).

The owning process is the one that opened the DRM file (FUSE's write carries no
caller pid): its thread-group id, held as a pidfd from USERPTR on so that a pid
reused by another process after the owner died is never written; the transfers are
process_vm_readv/writev (libc through ctypes; they honour the mapping's protection,
like the get_user_pages Linux does). A process that has gone, or a range no longer
mapped, fails the job with EFAULT (logged); the daemon carries on.
"""
from __future__ import annotations

import ctypes
import errno
import os
import select
import threading
import weakref

import numpy as np

from vgpu import uapi

from .errors import KmdError, check
from .vram import PAGE_SIZE

READONLY = uapi.AMDGPU_GEM_USERPTR_READONLY
ANONONLY = uapi.AMDGPU_GEM_USERPTR_ANONONLY
VALIDATE = uapi.AMDGPU_GEM_USERPTR_VALIDATE
REGISTER = uapi.AMDGPU_GEM_USERPTR_REGISTER
KNOWN_FLAGS = READONLY | ANONONLY | VALIDATE | REGISTER
USER_VA_END = 1 << 47      # x86-64's user address space
IOV_MAX = 1024             # iovecs per process_vm_* call
MERGE_GAP = 64             # changed runs closer than this are written back as one


class _iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_process_vm = {}
for _name in ("process_vm_readv", "process_vm_writev"):
    _fn = getattr(_libc, _name)
    _fn.argtypes = [ctypes.c_int, ctypes.POINTER(_iovec), ctypes.c_ulong, ctypes.POINTER(_iovec),
                    ctypes.c_ulong, ctypes.c_ulong]
    _fn.restype = ctypes.c_ssize_t
    _process_vm[_name] = _fn


class Owner:
    """The process a DRM file's userptr addresses belong to: its tgid and a pidfd."""

    def __init__(self, pid: int):
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)

    def alive(self) -> bool:
        """False once the process has exited (its pidfd polls readable)."""
        try:
            return not select.select([self.pidfd], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    def __del__(self):
        self.close()

    def _transfer(self, write: bool, local: int, remote: list[tuple[int, int]]) -> int:
        """Copy between the daemon's memory at `local` (contiguous) and the process's
        ranges `remote` [(address, length)]; returns the bytes moved (short on a fault).
        Raises OSError (ESRCH: gone; EFAULT; EPERM: not allowed to reach it)."""
        fn = _process_vm["process_vm_writev" if write else "process_vm_readv"]
        done = 0
        for i in range(0, len(remote), IOV_MAX):
            chunk = remote[i:i + IOV_MAX]
            total = sum(n for _, n in chunk)
            liov = _iovec(local + done, total)
            riov = (_iovec * len(chunk))(*[_iovec(a, n) for a, n in chunk])
            if not self.alive():
                raise OSError(errno.ESRCH, "the process has exited")
            n = fn(self.pid, ctypes.byref(liov), 1, riov, len(chunk), 0)
            if n < 0:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e))
            done += n
            if n < total:
                break
        return done

    def read(self, addr: int, out: np.ndarray) -> None:
        """Fill `out` (a contiguous uint8 array) from [addr, addr + out.size)."""
        if self._transfer(False, out.ctypes.data, [(addr, out.size)]) != out.size:
            raise OSError(errno.EFAULT, "part of the range is not mapped")

    def write_runs(self, addr: int, src: np.ndarray, runs: list[tuple[int, int]]) -> None:
        """Store src[start:end] at addr + start for each run (start, end)."""
        for start, end in runs:
            n = end - start
            if self._transfer(True, src.ctypes.data + start, [(addr + start, n)]) != n:
                raise OSError(errno.EFAULT, "part of the range is not mapped or not writable")


_owners: "weakref.WeakValueDictionary[int, Owner]" = weakref.WeakValueDictionary()
_owners_lock = threading.Lock()


def _tgid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    return pid


def owner_of(file) -> Owner:
    """The Owner of `file`'s userptr ranges (the thread group of the process that
    opened it), shared by its BOs. OSError if that process is gone."""
    with _owners_lock:
        owner = _owners.get(file.id)
        if owner is None or not owner.alive():
            owner = Owner(_tgid(file.pid))
            _owners[file.id] = owner
        return owner


def check_range(pid: int, addr: int, size: int, write: bool, anon_only: bool) -> tuple[int, str]:
    """What get_user_pages would say of [addr, addr+size) in process `pid`, from
    /proc/<pid>/maps: (0, "") if every page is mapped readable (and writable when
    `write`), else (EFAULT, why); with `anon_only` a file-backed mapping is (EPERM,
    why) (AMDGPU_GEM_USERPTR_ANONONLY: Linux tests vma->vm_file)."""
    end, pos = addr + size, addr
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return errno.EFAULT, f"process {pid} has exited"
    for line in lines:
        fields = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if hi <= pos:
            continue
        if lo > pos:
            break
        perms, inode = fields[1], int(fields[4])
        path = fields[5] if len(fields) > 5 else ""
        if "r" not in perms or (write and "w" not in perms):
            return errno.EFAULT, f"{lo:#x}-{hi:#x} is mapped {perms}"
        if anon_only and (inode != 0 or path.startswith("/")):
            return errno.EPERM, f"{lo:#x}-{hi:#x} is file-backed ({path or 'inode ' + str(inode)})"
        pos = hi
        if pos >= end:
            return 0, ""
    return errno.EFAULT, f"{pos:#x} is not mapped"


class UserPages:
    """The user range behind one userptr BO, and its copy-in/write-back state."""

    def __init__(self, owner: Owner, addr: int, size: int, flags: int):
        self.owner, self.addr, self.size, self.flags = owner, addr, size, flags
        self.lock = threading.Lock()
        self.active = 0                      # jobs running with it now
        self.snapshot: np.ndarray | None = None  # the bytes as last copied in / written back

    @property
    def readonly(self) -> bool:
        return bool(self.flags & READONLY)

    def describe(self) -> str:
        return (f"userptr {self.addr:#x}+{self.size:#x} of pid {self.owner.pid}"
                f"{' readonly' if self.readonly else ''}")

    def begin(self, storage: np.ndarray) -> tuple[int, str]:
        """A job that may use the BO starts: copy the range in unless another such job
        runs already. Returns (0, "") or (errno, why)."""
        with self.lock:
            if self.active:
                self.active += 1
                return 0, ""
            err, why = check_range(self.owner.pid, self.addr, self.size, not self.readonly,
                                   bool(self.flags & ANONONLY))
            if not err:
                try:
                    self.owner.read(self.addr, storage[:self.size])
                except OSError as e:
                    err, why = errno.EFAULT, f"reading it failed: {e.strerror}"
            if err:
                return err, why
            self.snapshot = None if self.readonly else storage[:self.size].copy()
            self.active = 1
            return 0, ""

    def end(self, storage: np.ndarray) -> tuple[int, str]:
        """That job has ended: write back the bytes it changed (not for READONLY).
        Returns (0, "") or (errno, why)."""
        with self.lock:
            self.active -= 1
            err, why = 0, ""
            if self.snapshot is not None:
                now = storage[:self.size]
                changed = np.flatnonzero(now != self.snapshot)
                if changed.size:
                    runs = _runs(changed)
                    try:
                        self.owner.write_runs(self.addr, now, runs)
                    except OSError as e:
                        err, why = errno.EFAULT, f"writing back {changed.size} bytes failed: {e.strerror}"
                    self.snapshot[changed] = now[changed]
            if self.active == 0:
                self.snapshot = None
            return err, why


def _runs(changed: np.ndarray) -> list[tuple[int, int]]:
    """Sorted changed offsets -> [(start, end)] runs; gaps under MERGE_GAP are bridged."""
    breaks = np.flatnonzero(np.diff(changed) > MERGE_GAP)
    starts = np.concatenate(([changed[0]], changed[breaks + 1]))
    ends = np.concatenate((changed[breaks], [changed[-1]])) + 1
    return list(zip(starts.tolist(), ends.tolist()))


# -- the ring's hooks (kmd/ring.py) ------------------------------------------------------

_job_bos: dict[int, list] = {}   # job id -> the userptr BOs begun for it
_job_lock = threading.Lock()
# DRM file id -> its userptr BOs (a userptr BO is never exported, so only its creator
# has a handle): a job of a file without any costs nothing to look at.
_file_bos: "dict[int, weakref.WeakSet]" = {}


def has_bos(file) -> bool:
    """Whether `file` has userptr BOs its jobs may have to copy in (begin_job)."""
    return bool(_file_bos.get(file.id))


def begin_job(dev, job) -> int:
    """Before a job runs (ring thread): copy in the userptr BOs it may touch. Returns 0,
    or the errno the job fails with (logged): EFAULT when the owner is gone or the
    range is not mapped as needed, EPERM for a file-backed range of an ANONONLY BO."""
    mine = _file_bos.get(job.file.id)
    if not mine:
        return 0
    with dev.lock:
        if job.file.closed:
            return 0
        listed = {id(b) for b in job.bos}
        bos = [b for b in list(mine) if not b.freed and (id(b) in listed or job.file.vm.maps_bo(b))]
    if not bos:
        return 0
    begun = []
    for bo in bos:
        err, why = bo.userptr.begin(bo.storage)
        if err:
            for b in begun:
                b.userptr.end(b.storage)
            dev.kmsg.log(f"job {job.id} of client {job.file.id} (pid {job.file.pid}) cannot start: "
                         f"{bo.userptr.describe()}: {why} ({errno.errorcode[err]})")
            return err
        begun.append(bo)
    with _job_lock:
        _job_bos[job.id] = begun
    return 0


def end_job(dev, job) -> None:
    """After a job ran (ring thread, before its fence): write back what it changed in
    its userptr BOs. A failure (the owner is gone) gives the job EFAULT, logged."""
    with _job_lock:
        bos = _job_bos.pop(job.id, ())
    for bo in bos:
        err, why = bo.userptr.end(bo.storage)
        if err:
            dev.kmsg.log(f"job {job.id} of client {job.file.id} (pid {job.file.pid}): "
                         f"{bo.userptr.describe()}: {why}")
            if not job.error:
                job.error = err


# -- the ioctl ---------------------------------------------------------------------------

def gem_userptr(dev, file, args, extra):
    """Make a BO of the caller's memory [addr, addr + size) (amdgpu_gem_userptr_ioctl):
    a GTT BO whose pages are copied from that range before each job that may use it and
    written back after it (the module docstring). `handle` comes back.

    Flags as Linux checks them: READONLY (the GPU may only read it), ANONONLY (only
    anonymous memory), VALIDATE (check the range now, as get_user_pages would),
    REGISTER (an MMU notifier on Linux; vgpu copies at job boundaries, so it is only
    recorded). EINVAL: addr or size not page aligned, size 0 or past the user address
    space, unknown flags. EACCES: neither READONLY nor REGISTER (Linux: writing needs
    the notifier). With VALIDATE: EFAULT if a page of the range is not mapped, not
    readable, or not writable without READONLY, or the process has gone; EPERM if
    ANONONLY and part of it is file-backed. ENOMEM: GTT is full."""
    addr, size, flags = args.addr, args.size, args.flags
    check(addr % PAGE_SIZE == 0 and size % PAGE_SIZE == 0, errno.EINVAL,
          f"addr {addr:#x} or size {size:#x} not page aligned")
    check(not flags & ~KNOWN_FLAGS, errno.EINVAL, f"unknown flags {flags & ~KNOWN_FLAGS:#x}")
    check(flags & (READONLY | REGISTER), errno.EACCES,
          "a writable userptr needs AMDGPU_GEM_USERPTR_REGISTER (or READONLY)")
    check(0 < size and addr + size <= USER_VA_END, errno.EINVAL,
          f"range {addr:#x}+{size:#x} empty or outside the user address space")
    try:
        owner = owner_of(file)
    except OSError:
        raise KmdError(errno.EFAULT, f"the process that opened the file (pid {file.pid}) is gone")
    if flags & VALIDATE:
        err, why = check_range(owner.pid, addr, size, not flags & READONLY, bool(flags & ANONONLY))
        check(not err, err, f"range {addr:#x}+{size:#x}: {why}")
    bo = dev.create_bo(file, size, PAGE_SIZE, uapi.AMDGPU_GEM_DOMAIN_GTT, 0)
    bo.userptr = UserPages(owner, addr, size, flags)
    bo.pin_count = 1   # its aperture pages are the copy begin()/end() fill: never moved
    args.handle = file.add_bo(bo)
    for gone in [fid for fid, bos in _file_bos.items() if not bos]:
        del _file_bos[gone]  # files whose userptr BOs are all freed
    _file_bos.setdefault(file.id, weakref.WeakSet()).add(bo)
