"""vgpu's wire contract, the bottom of the house: it imports nothing else of vgpu.

- :mod:`vgpu.uapi`: every request number and struct (amdgpu_drm.h / drm.h layouts);
- :mod:`vgpu.frame`: the one codec of the control-file protocol (request/reply frames);
- :mod:`vgpu.timeout`: wait deadlines with Linux's semantics, the "infinite" constant;
- :mod:`vgpu.errors`: how a user's mistake ends, at every entry point (docs/errors.md);
- :mod:`vgpu.sdma`, :mod:`vgpu.pm4`, :mod:`vgpu.isa`, :mod:`vgpu.asm`: the packet and
  instruction encodings (and the vISA assembler).

The KMD, the daemon, libvgpu and umd all build on it; the `vgpu` command lives
above everything in :mod:`vgpu_tools`.
"""

__version__ = "0.1.0"
