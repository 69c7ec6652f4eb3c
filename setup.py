"""Build vgpu: the Python packages, the Cython execution core (kmd.hw._core), the
memory apertures (kmd.hw._aperture), the ioctl answer in C (vdev.ioctl.fast) and a CS's
pointers read in C (vdev.ioctl.cs_gather). The rest is Python, run as Python: the CS
path's modules were once compiled as they are, and ran slower than the interpreter
(docs/bench.md, "The CS path compiled, measured again")."""
import subprocess
import sys
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

# The core's compile-time constants come from the Python definitions: generate
# kmd/hw/_sdma_defs.pxi and _cu_defs.pxi before cythonize reads them.
subprocess.run([sys.executable, str(Path(__file__).resolve().parent / "kmd/hw/gen_defs.py")], check=True)

core = Extension(
    "kmd.hw._core",
    sources=["kmd/hw/_core.pyx"],
    language="c++",
    extra_compile_args=["-O3", "-std=c++17", "-ffp-contract=off"],
)
aperture = Extension("kmd.hw._aperture", sources=["kmd/hw/_aperture.pyx"], extra_compile_args=["-O2"])
fast_ioctl = Extension("vdev.ioctl.fast", sources=["vdev/ioctl/fast.pyx"], extra_compile_args=["-O2"])
cs_gather = Extension("vdev.ioctl.cs_gather", sources=["vdev/ioctl/cs_gather.pyx"], extra_compile_args=["-O2"])

setup(
    name="vgpu",
    version="0.1.0",
    description="A DRM-style virtual GPU emulated through FUSE",
    packages=find_packages(include=["vgpu*", "vdev*", "kmd*", "libvgpu*", "umd*"]),
    ext_modules=cythonize([core, aperture, fast_ioctl, cs_gather], language_level=3,
                          compiler_directives={"boundscheck": False, "wraparound": False}),
    python_requires=">=3.10",
    install_requires=["pyfuse3>=3.2", "trio>=0.22", "numpy>=1.24"],
    entry_points={"console_scripts": ["vgpu = vgpu_tools.cli:main"]},
)
