"""The `vgpu` command and the tools on top of everything else: mount/umount (vdev),
dmesg/info (the mount's files), trace (strace + the frame codec), asm/disasm
(vgpu.asm), the demo (libvgpu). Nothing below imports this package."""
