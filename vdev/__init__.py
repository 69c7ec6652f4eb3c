"""vdev: the FUSE file system that exposes a vgpu KMD as a device tree.

``nodes`` are the files of the tree and their open files (the control files frame
ioctls with ``vgpu.frame``), ``fs`` is the pyfuse3 ``Operations`` serving MOUNT/,
``daemon`` mounts and runs it. See docs/vdev.md.
"""
