"""The nodes of the vgpu tree and the state of their open files (used by vdev.fs).

A Node is what an inode number names (directory, control file, generated file, BO
file, sync file); a handle is what one open() of it holds until release().
"""
from __future__ import annotations

import stat
from typing import Callable

# ---------------------------------------------------------------------------
# Nodes of the tree
# ---------------------------------------------------------------------------
class Node:
    def __init__(self, inode: int, mode: int, uid: int = 0):
        self.inode = inode
        self.mode = mode
        self.uid = uid

    @property
    def size(self) -> int:
        return 0


class Dir(Node):
    """A directory: fixed children, or children computed by ``provider`` each time
    the directory is listed or searched (sysfs, debugfs, devcoredump)."""

    def __init__(self, inode: int, parent: "Dir | None", provider: Callable[[], dict] | None = None):
        super().__init__(inode, stat.S_IFDIR | 0o755)
        self.parent = parent or self
        self.children: dict[str, Node] = {}
        self.provider = provider


class SyncFile(Node):
    """MOUNT/sync/<token-hex>: a kmd.syncobj.SyncExport (syncobj or sync file)."""

    def __init__(self, inode: int, export):
        super().__init__(inode, stat.S_IFREG | 0o400, export.uid)
        self.export = export


class ControlFile(Node):
    def __init__(self, inode: int, render: bool):
        super().__init__(inode, stat.S_IFREG | 0o666)
        self.render = render


class GeneratedFile(Node):
    """Text made on open by ``read_fn``; ``write_fn(bytes)`` takes writes if set."""

    def __init__(self, inode: int, read_fn: Callable, write_fn: Callable | None = None):
        super().__init__(inode, stat.S_IFREG | (0o644 if write_fn else 0o444))
        self.read_fn = read_fn
        self.write_fn = write_fn


class BoFile(Node):
    """MOUNT/bo/<offset-hex>: a symlink to the BO's shared-memory file. Opening it
    opens that tmpfs file directly (FUSE is not involved in the mapping at all)."""

    def __init__(self, inode: int, bo):
        super().__init__(inode, stat.S_IFLNK | 0o777, bo.uid)
        self.bo = bo
        self.offset = bo.mmap_offset
        self.target = bo.path.encode()
        self.nlookup = 0  # references the kernel holds (lookup minus forget)

    @property
    def size(self) -> int:
        return len(self.target)


# ---------------------------------------------------------------------------
# Open files
# ---------------------------------------------------------------------------
class ControlHandle:
    """One open of card0/renderD128 = one DRM file, plus its unread reply."""

    def __init__(self, file):
        self.file = file
        self.reply = None  # kmd Reply | PendingReply | None


class SnapshotHandle:
    def __init__(self, node: GeneratedFile, data: bytes):
        self.node = node
        self.data = data


class SyncHandle:
    """An open sync file: the status text of its first read, and the poll handle the
    kernel gave us while the fence is busy (armed: a notification is arranged)."""

    def __init__(self, node: SyncFile):
        self.export = node.export
        self.data: bytes | None = None
        self.poll_handle = None
        self.armed = False
