"""Build vgpu: the Python packages, the Cython execution core (kmd.hw._core), the
memory apertures (kmd.hw._aperture), the ioctl answer in C (vdev.ioctl.fast), a CS's
pointers read in C (vdev.ioctl.cs_gather), and the CS path's pure-Python modules compiled
as they are (vgpu.compiled.MODULES; their generated C goes to build/cython)."""
import subprocess
import sys
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from vgpu import compiled  # noqa: E402  (the list of modules, and their build record)

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
# The sources are not typed for Cython: annotation_typing off keeps an annotation a
# comment (`vm_jobs: set[int] = frozenset()` is legal Python and a C type error), and
# binding keeps functions introspectable (signatures, __wrapped__, monkeypatching);
# -w: the generated C's warnings say nothing about the Python it came from.
as_python = cythonize(
    [Extension(name, sources=[str(compiled.source_path(name).relative_to(ROOT))], extra_compile_args=["-O2", "-w"])
     for name in compiled.MODULES],
    build_dir="build/cython", quiet=True,
    compiler_directives={"language_level": 3, "binding": True, "annotation_typing": False})


class BuildExt(build_ext):
    """build_ext, then the record vgpu.compiled checks each compiled module against."""

    def run(self):
        super().run()
        compiled.write_manifest()

setup(
    name="vgpu",
    version="0.1.0",
    description="A DRM-style virtual GPU emulated through FUSE",
    packages=find_packages(include=["vgpu*", "vdev*", "kmd*", "libvgpu*", "umd*"]),
    ext_modules=cythonize([core, aperture, fast_ioctl, cs_gather], language_level=3,
                          compiler_directives={"boundscheck": False, "wraparound": False}) + as_python,
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.10",
    install_requires=["pyfuse3>=3.2", "trio>=0.22", "numpy>=1.24"],
    entry_points={"console_scripts": ["vgpu = vgpu_tools.cli:main"]},
)
