"""The vgpu device tree (docs/design.md section 2) as one pyfuse3 ``Operations``.

::

    dev/dri/card0, dev/dri/renderD128   control files: ioctl = write() request, read() reply
    dev/kmsg                            the KMD log, snapshotted at open
    bo/<offset-hex>                     one symlink per mmap-able BO (never listed),
                                        to its shared-memory file (kmd.shmem)
    prime/<token-hex>                   exported BOs (PRIME, never listed): size = the BO's,
                                        read()/write() reach its bytes
    sync/<token-hex>                    exported syncobjs and sync files (never listed):
                                        poll() gives POLLIN once signalled, read() a status
    sys/devices/pciffff:00/ffff:00:00.0/ffff:01:00.0/*  sysfs numbers, from Device.sysfs_files(),
                                        with drm/<node>/ and the links of Linux's shape:
                                        sys/class/drm/<node>, sys/dev/char/226:N, behind the
                                        PCIe root port ffff:00:00.0 (_build_sysfs)
    sys/kernel/debug/dri/0/*            debugfs views, from Device.debugfs_files()
    sys/class/devcoredump/devcd<N>/data crash dumps, from Device.devcoredumps()
    proc/<pid>/fdinfo/<client-id>       each DRM file's usage (drm-usage-stats), from
                                        Device.client_files(): mode 0400, its client's uid

Generated files (sysfs, debugfs, kmsg, dumps) are ``direct_io``: their text is taken
once at open() so a reader sees one consistent snapshot across read() calls, and
their size reads as 0 (like procfs), so tools read to end of file.

BO entries are symlinks to the BO's file in the daemon's tmpfs store: open(),
mmap(), read() and write() of ``bo/<offset-hex>`` go to that file, whose pages the
daemon has mapped into its VRAM/GTT aperture. There is one copy of every byte and
nothing to push or flush (docs/memory.md).

Permission checks are ours (mounted without ``default_permissions``), made from the
requester's uid and groups (the FUSE request context, /proc/<pid>/status) on every
lookup, open, opendir, access, readlink and truncate, with Linux's modes
(docs/vdev.md, "Permissions"): card0 0660 group video and renderD128 0666 (mount
options), sys/kernel/debug 0700 and devcoredump data 0600 (root only), sysfs and kmsg
world-readable. The kernel may follow cached names without asking, so an open checks
every directory above the file too. A BO symlink is read (readlink) by the BO's uid or
root only, and its target is a 0600 file of that uid in a directory nobody else lists.

Every handler converts KmdError to its errno and any other exception to EIO with a
kmsg line: pyfuse3 ends its main loop on an uncaught exception, and the daemon must
never die on bad input (docs/design.md 5.6).
"""
from __future__ import annotations

import errno
import functools
import itertools
import logging
import os
import re
import time

import pyfuse3

from vgpu.frame import FrameError
from vgpu.paths import PCI_PORT_PATH, PCI_PORT_SLOT, PCI_ROOT

from .kmd_interface import KmdError, KmdGpu, OwnedText, Stream, root_port_files
from .ioctl.drm_debug import DrmDebug
from .ioctl.fast import FastPath
from .ioctl.path import IoctlPath
from .nodes import (ALWAYS_READY, MAY_EXEC, MAY_READ, MAY_WRITE, BoFile, ControlFile, ControlHandle, Credentials, Dir,
                    GeneratedFile, Handle, Node, PrimeFile, StreamFile, Symlink, SyncFile)
from .options import NodePermissions

log = logging.getLogger(__name__)

BO_INODE_BASE = 1 << 32
# The DRM minors' major: partition N (kmd/partition.py) has card<N> and renderD<128 + N>.
DRM_MAJOR = 226
_HEX_NAME = re.compile(r"[0-9a-f]{1,16}")


def _guard(fn):
    """Turn KmdError into its errno and any unexpected exception into EIO (logged)."""

    @functools.wraps(fn)
    async def handler(self, *args):
        try:
            return await fn(self, *args)
        except pyfuse3.FUSEError:
            raise
        except (KmdError, FrameError) as e:
            raise pyfuse3.FUSEError(e.errno) from e
        except Exception as e:
            log.exception("vdev: %s failed", fn.__name__)
            self.dev.kmsg.log(f"vdev: internal error in {fn.__name__}: {e!r}")
            raise pyfuse3.FUSEError(errno.EIO) from e

    return handler


class VgpuFs(pyfuse3.Operations):
    """MOUNT/ for one GPU, whole or partitioned (the contract: vdev.kmd_interface.KmdGpu,
    whose partitions are each a KmdDevice)."""

    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, dev: KmdGpu, perms: NodePermissions | None = None):
        super().__init__()
        self.dev = dev
        self.perms = perms = perms or NodePermissions()
        # The tree belongs to the daemon's user (root for a system-wide mount): its
        # owner bits are that user's, root passes every check.
        self.owner = os.geteuid()
        self.time_ns = time.time_ns()
        self._inodes: dict[int, Node] = {}
        self._next_inode = itertools.count(pyfuse3.ROOT_INODE + 1)
        self._next_bo_inode = itertools.count(BO_INODE_BASE)
        self._bo_files: dict[int, BoFile] = {}  # mmap offset -> newest BoFile the kernel knows
        self._handles: dict[int, Handle] = {}
        self._next_fh = itertools.count(1)
        self._dir_listings: dict[int, list] = {}
        self.ioctls = IoctlPath(dev.kmsg.log)
        self.drm_debug = DrmDebug(self.ioctls)   # sets self.ioctls.observe while drm.debug has DRM_UT_CORE
        self.fast = FastPath(self.ioctls)   # the clock read, finished waits answered in C (vdev/ioctl/fast.pyx)

        root = self._add(Dir(pyfuse3.ROOT_INODE, None, uid=self.owner))
        dev_dir = self._mkdir(root, "dev")
        dri = self._mkdir(dev_dir, "dri")
        for part in dev.partitions:   # card<i> and renderD<128 + i> drive partition i
            i = part.partition.index
            self._link(dri, f"card{i}", ControlFile(self._ino(), render=False, mode=perms.card_mode,
                                                    gid=perms.gid, device=part)).gone_with = part
            self._link(dri, f"renderD{128 + i}", ControlFile(self._ino(), render=True, mode=perms.render_mode,
                                                             gid=perms.gid, device=part)).gone_with = part
        self._link(dev_dir, "kmsg", GeneratedFile(self._ino(), lambda: dev.kmsg.text()))
        self.bo_dir = self._mkdir(root, "bo")
        self.prime_dir = self._mkdir(root, "prime")
        self.sync_dir = self._mkdir(root, "sync")
        sys_dir = self._mkdir(root, "sys")
        cls = self._build_sysfs(sys_dir)
        # Linux: devcd<N>/data is 0600 root; debugfs is mounted 0700 root.
        self._mkdir(cls, "devcoredump", provider=self._devcoredumps).file_mode = 0o600
        debug = self._mkdir(self._mkdir(sys_dir, "kernel"), "debug", mode=0o700)
        debug_dri = self._mkdir(debug, "dri")
        for part in dev.partitions:
            self._mkdir(debug_dri, str(part.partition.index), provider=part.debugfs_files).gone_with = part
        self._mkdir(debug, "tracing", provider=dev.tracing_files)
        self._mkdir(root, "proc", provider=dev.client_files, mode=0o555)  # proc/<pid>/fdinfo/<client>

    # -- tree building --------------------------------------------------------
    def _ino(self) -> int:
        return next(self._next_inode)

    def _add(self, node: Node) -> Node:
        self._inodes[node.inode] = node
        return node

    def _adopt(self, parent: Dir, node: Node) -> Node:
        """A new node of the tree under `parent`: the daemon's, below `parent`."""
        node.parent, node.uid = parent, self.owner
        return self._add(node)

    def _link(self, parent: Dir, name: str, node: Node) -> Node:
        parent.children[name] = parent.fixed[name] = self._adopt(parent, node)
        return node

    def _mkdir(self, parent: Dir, name: str, provider=None, mode: int = 0o755) -> Dir:
        return self._link(parent, name, Dir(self._ino(), parent, provider, mode))

    def _mkdirs(self, parent: Dir, path: str) -> Dir:
        for name in path.split("/"):
            child = parent.children.get(name)
            parent = child if isinstance(child, Dir) else self._mkdir(parent, name)
        return parent

    def _symlink(self, parent: Dir, name: str, target: str) -> Symlink:
        return self._link(parent, name, Symlink(self._ino(), target))

    def _build_sysfs(self, sys_dir: Dir) -> Dir:
        """sys/ in Linux's shape for one amdgpu PCI device per partition (function N
        of vgpu.paths.PCI_BUS for partition N: ffff:01:00.0 alone when unpartitioned),
        behind the PCIe root port ffff:00:00.0 on the host bridge PCI_ROOT, what
        libdrm's drmGetDevices2 / drmGetDevice2 / drmGetNodeTypeFromFd and nvtop's
        walk up to the pcieport bridges read (docs/vdev.md, "sysfs"). Returns
        sys/class/. Every link is relative: it stays in the mount."""
        def up(path: str) -> str:
            """From the directory sys/<path> back to sys/."""
            return "../" * len(path.split("/"))

        cls = self._mkdir(sys_dir, "class")
        class_drm = self._mkdir(cls, "drm")
        self._link(class_drm, "version", GeneratedFile(self._ino(), lambda: "drm 1.1.0 20060810\n"))
        char = self._mkdirs(sys_dir, "dev/char")
        bus = self._mkdirs(sys_dir, "bus/pci")
        bus_devices, driver = self._mkdir(bus, "devices"), self._mkdirs(bus, "drivers/amdgpu")
        # the host bridge, a device without a driver (an empty uevent, as Linux's), and the
        # root port on its bus (kmd/pci.py), fixed: it stays when the GPU is removed
        host_bridge = self._mkdirs(sys_dir, f"devices/{PCI_ROOT}")
        self._link(host_bridge, "uevent", GeneratedFile(self._ino(), lambda: ""))
        port_path = f"devices/{PCI_PORT_PATH}"
        port = self._mkdirs(sys_dir, port_path)
        port.provider = root_port_files
        self._symlink(port, "subsystem", f"{up(port_path)}bus/pci")
        self._symlink(port, "driver", f"{up(port_path)}bus/pci/drivers/pcieport")
        self._symlink(bus_devices, PCI_PORT_SLOT, f"{up('bus/pci/devices')}{port_path}")
        self._symlink(self._mkdirs(bus, "drivers/pcieport"), PCI_PORT_SLOT,
                      f"{up('bus/pci/drivers/pcieport')}{port_path}")
        for part in self.dev.partitions:
            slot, i = part.partition.pci_slot, part.partition.index
            pci_path = f"{port_path}/{slot}"
            pci = self._mkdirs(sys_dir, pci_path)
            pci.provider = part.sysfs_files  # vendor, device, ..., uevent, mem_info_*
            pci.gone_with = part   # `echo 1 > remove` takes it away (kmd/pci_hotplug.py)
            self._symlink(pci, "subsystem", f"{up(pci_path)}bus/pci")
            self._symlink(pci, "driver", f"{up(pci_path)}bus/pci/drivers/amdgpu")
            # hwmon<i>: a class device, as libsystemd's sd-device (nvtop) and `sensors` find
            # it: its files from the KMD (kmd/pm_sysfs.py), device/subsystem links, and
            # sys/class/hwmon/hwmon<i>
            hwmon_path = f"{pci_path}/hwmon/hwmon{i}"
            hwmon = self._mkdirs(sys_dir, hwmon_path)
            hwmon.provider = lambda p=part: p.sysfs_files()["hwmon"]["hwmon0"]
            self._symlink(hwmon, "device", f"../../../{slot}")
            self._symlink(hwmon, "subsystem", f"{up(hwmon_path)}class/hwmon")
            self._symlink(self._mkdirs(sys_dir, "class/hwmon"), f"hwmon{i}",
                          f"{up('class/hwmon')}{hwmon_path}").gone_with = part
            drm = self._mkdir(pci, "drm")
            for name, minor in ((f"card{i}", i), (f"renderD{128 + i}", 128 + i)):
                node = self._mkdir(drm, name)
                self._link(node, "uevent", GeneratedFile(self._ino(), lambda n=name, m=minor: (
                    f"MAJOR={DRM_MAJOR}\nMINOR={m}\nDEVNAME=dri/{n}\nDEVTYPE=drm_minor\n")))
                self._link(node, "dev", GeneratedFile(self._ino(), lambda m=minor: f"{DRM_MAJOR}:{m}\n"))
                self._symlink(node, "device", f"../../../{slot}")
                self._symlink(node, "subsystem", f"{up(f'{pci_path}/drm/{name}')}class/drm")
                self._symlink(class_drm, name, f"{up('class/drm')}{pci_path}/drm/{name}").gone_with = part
                self._symlink(char, f"{DRM_MAJOR}:{minor}", f"{up('dev/char')}{pci_path}/drm/{name}").gone_with = part
            self._symlink(bus_devices, slot, f"{up('bus/pci/devices')}{pci_path}").gone_with = part
            self._symlink(driver, slot, f"{up('bus/pci/drivers/amdgpu')}{pci_path}").gone_with = part
        # bus/pci/rescan (0200): probes the removed functions again (kmd/pci_hotplug.py)
        for name, (read_fn, write_fn, mode) in self.dev.pci_bus_files().items():
            self._link(bus, name, GeneratedFile(self._ino(), read_fn, write_fn, mode))
        # Not in Linux: the daemon's pid, for clients to name it their ptracer
        # (PR_SET_PTRACER) under Yama, so that it may read their ioctl pointers.
        vgpu_mod = self._mkdirs(sys_dir, "module/vgpu")
        self._link(vgpu_mod, "daemon_pid", GeneratedFile(self._ino(), lambda: f"{os.getpid()}\n"))
        # drm.debug (vdev/ioctl/drm_debug.py): 0644, the daemon's user's, as Linux's root one
        drm_params = self._mkdirs(sys_dir, "module/drm/parameters")
        self._link(drm_params, "debug", GeneratedFile(self._ino(), self.drm_debug.read, self.drm_debug.write))
        return cls

    def _devcoredumps(self) -> dict:
        """The provider of sys/class/devcoredump/: {devcd<N>: {data: text}}."""
        return {f"devcd{n}": {"data": (lambda text=text: text)}
                for n, text in self.dev.devcoredumps().items()}

    def _refresh(self, d: Dir) -> dict[str, Node]:
        """The current children of ``d``; provider entries keep their inode by name."""
        if d.provider is None:
            return d.children
        current = dict(d.fixed)
        for name, entry in d.provider().items():
            if name in d.fixed:
                continue  # the tree's own entries win
            node = d.children.get(name)
            if isinstance(entry, dict):
                if not isinstance(node, Dir):
                    node = d.children[name] = self._adopt(d, Dir(self._ino(), d))
                    node.file_mode = d.file_mode
                node.provider = (lambda e=entry: e)
            elif isinstance(entry, Stream):
                if not isinstance(node, StreamFile):
                    node = d.children[name] = self._adopt(d, StreamFile(self._ino(), entry))
                node.stream = entry
            elif isinstance(entry, OwnedText):    # readable by its owner only (fdinfo)
                if not isinstance(node, GeneratedFile):
                    node = d.children[name] = self._adopt(d, GeneratedFile(self._ino(), entry.read, None, 0o400))
                node.read_fn, node.uid = entry.read, entry.uid
            else:
                # (read, write) or (read, write, mode): a write-only attribute is 0200 (remove)
                read_fn, write_fn, *mode = entry if isinstance(entry, tuple) else (entry, None)
                if not isinstance(node, GeneratedFile) or bool(node.write_fn) != bool(write_fn):
                    node = d.children[name] = self._adopt(d, GeneratedFile(self._ino(), read_fn, write_fn,
                                                                           mode[0] if mode else d.file_mode))
                node.read_fn, node.write_fn = read_fn, write_fn
            current[name] = node
        return current

    # -- attributes -------------------------------------------------------------
    def _attr(self, node: Node) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.inode
        a.generation = 0
        a.st_mode = node.mode
        a.st_nlink = node.nlink
        a.st_uid = node.uid
        a.st_gid = node.gid
        a.st_rdev = 0
        a.st_size = node.size
        a.st_blksize = 4096
        a.st_blocks = (node.size + 511) // 512
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = self.time_ns
        a.entry_timeout = a.attr_timeout = node.cache_timeout
        return a

    def _node(self, inode: int) -> Node:
        node = self._inodes.get(inode)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return node

    # -- permissions ------------------------------------------------------------
    def _may(self, node: Node, cred: Credentials, want: int) -> bool:
        """``want`` on ``node``, and search permission on every directory above it (the
        kernel may walk a cached path without asking us)."""
        d = node.parent
        while d is not None:
            if not d.permits(cred, MAY_EXEC):
                return False
            if d.parent is d:
                break
            d = d.parent
        return node.permits(cred, want)

    def _require(self, node: Node, ctx, want: int) -> Credentials:
        cred = Credentials(ctx)
        if not self._may(node, cred, want):
            if want & MAY_WRITE and getattr(node, "write_fn", None) is not None:
                # A refused write to an action file (tracing's events/*/enable) is worth a line.
                self.dev.kmsg.log(f"{self._path(node)}: write by uid {cred.uid} (pid {cred.pid}) "
                                  f"denied: root only")
            raise pyfuse3.FUSEError(errno.EACCES)
        return cred

    def _path(self, node: Node) -> str:
        parts = []
        while node.parent is not None and node.parent is not node:
            parent = node.parent
            parts.append(next((n for n, c in parent.children.items() if c is node), "?"))
            node = parent
        return "/".join(reversed(parts))

    @staticmethod
    def _wanted(flags: int) -> int:
        acc = flags & os.O_ACCMODE
        want = {os.O_RDONLY: MAY_READ, os.O_WRONLY: MAY_WRITE}.get(acc, MAY_READ | MAY_WRITE)
        return want | (MAY_WRITE if flags & os.O_TRUNC else 0)

    @_guard
    async def getattr(self, inode, ctx=None):
        return self._attr(self._node(inode))

    @_guard
    async def setattr(self, inode, attr, fields, fh, ctx):
        node = self._node(inode)
        # An O_TRUNC open (`echo 1 > enable`) arrives as a size change first:
        # the node says whether it accepts one (it is then ignored).
        if fields.update_size and not node.truncatable:
            raise pyfuse3.FUSEError(errno.EPERM)
        if fields.update_size:
            self._require(node, ctx, MAY_WRITE)
        if fields.update_mode or fields.update_uid or fields.update_gid:
            raise pyfuse3.FUSEError(errno.EPERM)
        return self._attr(node)

    @_guard
    async def lookup(self, parent_inode, name, ctx=None):
        parent = self._node(parent_inode)
        if not isinstance(parent, Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        text = name.decode("utf-8", "surrogateescape")
        if ctx is not None:
            self._require(parent, ctx, MAY_EXEC)
        if text == ".":
            return self._attr(parent)
        if text == "..":
            return self._attr(parent.parent)
        if parent is self.bo_dir:
            return self._attr(self._lookup_bo(text))
        if parent is self.sync_dir:
            return self._attr(self._lookup_sync(text))
        if parent is self.prime_dir:
            return self._attr(self._lookup_prime(text))
        node = self._refresh(parent).get(text)
        if node is None or not node.present():   # present(): a removed PCI device's entries
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(node)

    def _lookup_bo(self, name: str) -> BoFile:
        # Only the canonical spelling names a BO: lowercase hex, no prefix, no
        # leading zeros, so each BO has exactly one file.
        if not _HEX_NAME.fullmatch(name) or format(int(name, 16), "x") != name:
            raise pyfuse3.FUSEError(errno.ENOENT)
        offset = int(name, 16)
        bo = self.dev.bo_by_offset(offset)
        if bo is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        node = self._bo_files.get(offset)
        if node is None or node.bo is not bo:
            node = self._add(BoFile(next(self._next_bo_inode), bo))
            node.parent = self.bo_dir
            self._bo_files[offset] = node
        node.nlookup += 1
        return node

    def _lookup_sync(self, name: str) -> SyncFile:
        # Canonical lowercase hex only, as for BO files; a fresh inode per lookup
        # keeps no state here (the KMD's token table is the truth, rechecked at open).
        if not _HEX_NAME.fullmatch(name) or format(int(name, 16), "x") != name:
            raise pyfuse3.FUSEError(errno.ENOENT)
        export = self.dev.sync_file_by_token(int(name, 16))
        if export is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        node = self._add(SyncFile(next(self._next_bo_inode), export))
        node.parent = self.sync_dir
        return node

    def _lookup_prime(self, name: str) -> PrimeFile:
        # As sync/: canonical lowercase hex, a fresh inode per lookup, the KMD's
        # token table rechecked at open.
        if not _HEX_NAME.fullmatch(name) or format(int(name, 16), "x") != name:
            raise pyfuse3.FUSEError(errno.ENOENT)
        export = self.dev.prime_by_token(int(name, 16))
        if export is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        node = self._add(PrimeFile(next(self._next_bo_inode), export))
        node.parent = self.prime_dir
        return node

    @_guard
    async def readlink(self, inode, ctx):
        node = self._node(inode)
        self._require(node, ctx, 0)
        return node.readlink(self.dev, ctx)

    async def forget(self, inode_list):
        for inode, nlookup in inode_list:
            node = self._inodes.get(inode)
            if node is None or not node.forget(nlookup):
                continue  # the static tree and generated files live as long as the mount
            del self._inodes[inode]
            if isinstance(node, BoFile) and self._bo_files.get(node.offset) is node:
                del self._bo_files[node.offset]

    @_guard
    async def access(self, inode, mode, ctx):
        node = self._node(inode)
        return self._may(node, Credentials(ctx), mode & 7) and node.may_access(ctx.uid)

    @_guard
    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_namemax = 255
        return s

    # -- directories --------------------------------------------------------------
    @_guard
    async def opendir(self, inode, ctx):
        node = self._node(inode)
        if not isinstance(node, Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        self._require(node, ctx, MAY_READ)
        fh = next(self._next_fh)
        # bo/, sync/ and prime/ list nothing: their names are capabilities (GEM_MMAP, tokens).
        children = {} if node in (self.bo_dir, self.sync_dir, self.prime_dir) else self._refresh(node)
        self._dir_listings[fh] = sorted((n, c) for n, c in children.items() if c.present())
        return fh

    @_guard
    async def readdir(self, fh, start_id, token):
        entries = self._dir_listings.get(fh, [])
        for i in range(start_id, len(entries)):
            name, node = entries[i]
            if not pyfuse3.readdir_reply(token, name.encode(), self._attr(node), i + 1):
                break

    async def releasedir(self, fh):
        self._dir_listings.pop(fh, None)

    # -- files ----------------------------------------------------------------------
    # Each open() makes a Handle (vdev.nodes) that answers the file's own calls.
    @_guard
    async def open(self, inode, flags, ctx):
        node = self._node(inode)
        self._require(node, ctx, self._wanted(flags))
        handle = node.open(self.dev, flags, ctx)
        if not isinstance(handle, ControlHandle):
            return self._new_handle(handle)
        handle.ioctls = self.ioctls   # its frame requests are observed as ioctls are (drm.debug)
        info = self._new_handle(handle)
        self.fast.add(info.fh, handle)
        return info

    def _new_handle(self, handle: Handle) -> pyfuse3.FileInfo:
        """Every file vdev itself serves is direct_io (no page cache): its data is
        made per request. BO data never passes through here (symlinks)."""
        fh = next(self._next_fh)
        self._handles[fh] = handle
        return pyfuse3.FileInfo(fh=fh, direct_io=True)

    def _handle(self, fh: int) -> Handle:
        handle = self._handles.get(fh)
        if handle is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        return handle

    @_guard
    async def read(self, fh, off, size):
        return await self._handle(fh).read(off, size)

    @_guard
    async def write(self, fh, off, buf):
        return await self._handle(fh).write(off, buf)

    def ioctl(self, inode, fh, cmd, arg, in_buf, out_size, flags, ctx):
        """FUSE_IOCTL (the patched pyfuse3, docs/ioctl.md): a DRM request on a control
        file, answered by vdev.ioctl.path; anything else is ENOTTY. Called in the
        loop, not awaited: a reply that needs no wait costs no task."""
        handle = self._handles.get(fh)
        if not isinstance(handle, ControlHandle):
            raise pyfuse3.FUSEError(errno.ENOTTY)
        try:
            return self.ioctls.answer(handle, cmd, arg, in_buf, out_size, ctx.pid)
        except pyfuse3.FUSEError:
            raise
        except Exception as e:  # never out of the FUSE loop: pyfuse3 would stop serving
            log.exception("vdev: ioctl %#x failed", cmd)
            self.dev.kmsg.log(f"vdev: internal error in ioctl {cmd:#x}: {e!r}")
            raise pyfuse3.FUSEError(errno.EIO) from e

    @_guard
    async def poll(self, inode, fh, poll_handle, ctx):
        """The handle's ready events (vdev.nodes.Handle.poll). A file without a
        handle is always ready, as without a poll handler: raising ENOSYS would
        switch poll off for the whole mount."""
        h = self._handles.get(fh)
        if h is None:
            return ALWAYS_READY
        return h.poll(poll_handle)

    async def flush(self, fh):
        pass

    async def fsync(self, fh, datasync):
        pass

    @_guard
    async def release(self, fh):
        h = self._handles.pop(fh, None)
        self.fast.remove(fh)
        if h is not None:
            await h.release()
