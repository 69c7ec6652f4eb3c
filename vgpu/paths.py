"""The one device-path rule (docs/design.md section 2): a device is named by its
mount point or by any node path under it (MOUNT/dev/dri/renderD128 or card0).
libvgpu, umd, the samples and the `vgpu` command all resolve names here."""
from __future__ import annotations

import os
from pathlib import Path

RENDER_NODE = Path("dev") / "dri" / "renderD128"
CARD_NODE = Path("dev") / "dri" / "card0"


def _is_node(p: Path) -> bool:
    # A mount point is a directory; a node is MOUNT/dev/dri/<file>.
    return not p.is_dir() and p.parent.name == "dri" and p.parent.parent.name == "dev"


def node_path(path: str | os.PathLike) -> Path:
    """The control file to open: ``path`` itself if it names a node, else the
    render node under the mount point ``path``."""
    p = Path(path)
    return p if _is_node(p) else p / RENDER_NODE


def mount_point(path: str | os.PathLike) -> Path:
    """The mount point of a device named by its mount point or a node under it."""
    p = Path(path)
    return p.parents[2] if _is_node(p) else p
