"""Implementations linked into kernels that call umd.declare_device functions
(tests/umd/numba_program_kernels.py): a Python file of device functions, what `link=`
names in vgpu (docs/umd.md, "Linking device functions")."""
import umd


@umd.jit(device=True)
def sum_reduce(x, n):
    acc = 0.0
    for k in range(n):
        acc += x[k]
    return acc


def clamp_linked(v, lo, hi):
    """A plain function: compiled as a device function when linked."""
    return min(max(v, lo), hi)
