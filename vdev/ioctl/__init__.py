"""The ioctl path of the device nodes (docs/ioctl.md): FUSE_IOCTL on card0 and
renderD128 answered as Linux's drm_ioctl() answers an ioctl.

- :mod:`.uaccess`: the caller's memory, read and written as copy_from_user /
  copy_to_user do (process_vm_readv/writev); the one place in Python that touches it.
- :mod:`.cs_gather`: a plain CS's chunks read from the caller in C, three system
  calls (docs/ioctl.md, "The CS gather in C"); everything else, and every refusal,
  goes through vgpu.pointers.
- :mod:`.fast`: AMDGPU_INFO TIMESTAMP, and WAIT_CS of a finished job, answered in C
  before pyfuse3 makes a Python object for the request (docs/ioctl.md, "The clock
  read", "Finished waits").
- :mod:`.path`: one FUSE_IOCTL request, from the kernel's copy of the struct to the
  reply: the pointed-to data gathered (vgpu.pointers), the KMD's dispatch, the
  out-data scattered back; a blocking request handed to the trio loop; the light
  jobs a CS submitted run once its reply is written.
"""
