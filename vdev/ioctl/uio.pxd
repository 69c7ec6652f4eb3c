# The kernel's cross-process copies (<sys/uio.h>), for the ioctl path's C modules
# (fast.pyx, cs_gather.pyx): copy_from_user / copy_to_user on the caller's memory.
cdef extern from "<sys/uio.h>":
    struct iovec:
        void *iov_base
        size_t iov_len
    ssize_t process_vm_readv(int pid, const iovec *local_iov, unsigned long liovcnt,
                             const iovec *remote_iov, unsigned long riovcnt,
                             unsigned long flags) nogil
    ssize_t process_vm_writev(int pid, const iovec *local_iov, unsigned long liovcnt,
                              const iovec *remote_iov, unsigned long riovcnt,
                              unsigned long flags) nogil
