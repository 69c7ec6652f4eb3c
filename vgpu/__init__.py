"""vgpu: a DRM-style virtual GPU emulated through FUSE.

The uapi (request numbers, structs, framing) lives in :mod:`vgpu.uapi`; the
command-line tool in :mod:`vgpu.cli`. This package stays import-light so that
``libvgpu`` can import ``vgpu.uapi`` without pulling in the driver or FUSE.
"""

__version__ = "0.1.0"
