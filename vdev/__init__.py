"""vdev: the FUSE file system that exposes a vgpu KMD as a device tree.

``nodes`` are the files of the tree and their open files (the control files frame
ioctls with ``vgpu.frame``), ``fs`` is the pyfuse3 ``Operations`` serving MOUNT/,
``daemon`` mounts and runs it. See docs/vdev.md.
"""
from vgpu import compiled as _compiled  # first: a stale compiled module must not load (vgpu/compiled.py)

_compiled.install()
