"""Build vgpu: the Python packages and the Cython execution core (kmd.hw._core)
and the memory apertures (kmd.hw._aperture)."""
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

setup(
    name="vgpu",
    version="0.1.0",
    description="A DRM-style virtual GPU emulated through FUSE",
    packages=find_packages(include=["vgpu*", "vdev*", "kmd*", "libvgpu*", "umd*"]),
    ext_modules=cythonize([core, aperture], language_level=3,
                          compiler_directives={"boundscheck": False, "wraparound": False}),
    python_requires=">=3.10",
    install_requires=["pyfuse3>=3.2", "trio>=0.22", "numpy>=1.24"],
    entry_points={"console_scripts": ["vgpu = vgpu_tools.cli:main"]},
)
