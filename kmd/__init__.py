"""The kernel-mode driver behind the vgpu device nodes.

`kmd.device.Device` is the whole driver; `vdev` talks to it only through the
contract in docs/internals.md. Nothing here imports `vdev`.
"""
