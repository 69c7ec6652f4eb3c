"""A module made of plain functions turned into device functions by umd.jit_module()
at its bottom, as numba's cuda.jit_module (tests/umd/test_numba_host.py)."""
import numpy as np

import umd
from umd import f32


def inc(x):
    return x + 1


def add(x, y):
    return x + y


def inc_add(x):
    return add(x, inc(x))


mean = np.mean                 # not defined here: left alone


@umd.jit
def call_inc_add(x: f32[:]):
    i = umd.grid(1)
    if i < x.size:
        x[i] = inc_add(x[i])


umd.jit_module()
