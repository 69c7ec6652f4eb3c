"""vdev: the FUSE file system that exposes a vgpu KMD as a device tree.

``control`` frames ioctls on the control files (pure, no FUSE), ``fs`` is the
pyfuse3 ``Operations`` serving MOUNT/, ``daemon`` mounts and runs it. See
docs/vdev.md.
"""
