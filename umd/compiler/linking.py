"""`umd.declare_device` (Numba's `cuda.declare_device`): a device function declared by
name and signature, whose implementation is linked in from a file named by `link=`
(on the declaration, or on the `@umd.jit` kernel that calls it; docs/umd.md, "Linking
device functions").

    sum_reduce = umd.declare_device("sum_reduce", "float32(float32[:], int32)",
                                    link=["reductions.py"])

    @umd.jit(link=["reductions.py"])            # or here, as Numba's link= on @cuda.jit
    def k(x: f32[:], out: f32[:]):
        out[0] = sum_reduce(x, len(x))

vgpu runs vISA, not PTX, so CUDA C, PTX, LTO-IR or cubins cannot be linked: an
implementation is a Python file that defines the function under the declared name,
as a `@umd.jit(device=True)` function (or a plain function, compiled as one). It is
inlined as every device function is (there is no call ABI to link vISA code against).
A declaration no link file implements is a compile error at the call.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re

from umd.types import PtrType, ScalarType, b1, f32, f64, i8, i16, i32, i64, split_type_list, u8, u16, u32, u64

from .functions import DeviceFunction

# Numba's type names in signature strings (numba.core.types): u8 is uint64 there.
TYPE_NAMES = {"float32": f32, "float64": f64, "int32": i32, "int64": i64, "uint32": u32,
              "uint64": u64, "uint8": u8, "int8": i8, "uint16": u16, "int16": i16,
              "boolean": b1, "bool_": b1, "f4": f32, "f8": f64, "i4": i32, "i8": i64, "u4": u32,
              "u8": u64, "u1": u8, "i1": i8, "u2": u16, "i2": i16, "b1": b1, "intp": i64,
              "uintp": u64, "float_": f32, "double": f64}
PYTHON_SUFFIXES = (".py",)
_SIG = re.compile(r"^\s*(\w+)\s*\((.*)\)\s*$", re.S)
_CPOINTER = re.compile(r"^\s*CPointer\s*\(\s*(\w+)\s*\)\s*$")
_ARG = re.compile(r"^\s*(\w+)\s*(\[([:,\s]*)(?:::1)?\])?\s*$")


class LinkError(TypeError):
    """A bad declaration or link list (a TypeError, at the call that made it)."""


def parse_signature(sig: str):
    """(return type or None for void, [argument types]) of a Numba signature string
    such as 'float32(float32[:], int32)'. Array types are umd's PtrType."""
    if not isinstance(sig, str):
        raise LinkError(f"declare_device: the signature is a string such as "
                        f"'float32(float32[:], int32)', not {sig!r}")
    m = _SIG.match(sig)
    if not m:
        raise LinkError(f"declare_device: cannot read the signature {sig!r} (expected "
                        "'rettype(argtype, ...)', e.g. 'float32(float32[:], int32)')")
    ret = None if m.group(1) == "void" else _type(m.group(1), sig)
    return ret, [_arg_type(a, sig) for a in split_type_list(m.group(2))]


def _type(name: str, sig: str) -> ScalarType:
    t = TYPE_NAMES.get(name)
    if t is None:
        raise LinkError(f"declare_device: unknown type {name!r} in {sig!r} (Numba's names: "
                        "float32, int32, float64[:], ...)")
    return t


def _arg_type(text: str, sig: str):
    m = _CPOINTER.match(text)
    if m:                       # Numba's CPointer(T): a C pointer, umd's Ptr[T]
        return PtrType(_type(m.group(1), sig), 0)
    m = _ARG.match(text)
    if not m:
        raise LinkError(f"declare_device: cannot read the argument type {text.strip()!r} in {sig!r}")
    t = _type(m.group(1), sig)
    if m.group(2) is None:
        return t
    ndim = m.group(2).count(":") - 2 * m.group(2).count("::1") + m.group(2).count("::1")
    return PtrType(t, max(1, min(3, ndim)))


class DeclaredDevice:
    """What `umd.declare_device(name, sig, link=None)` returns: called from kernels;
    its body is the function `name` of a linked Python file."""

    def __init__(self, name: str, sig: str, link=None) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise LinkError(f"declare_device: the name must be a Python identifier, not {name!r}")
        self.name, self.sig = name, sig
        self.ret, self.args = parse_signature(sig)
        self.link = check_links(link, "declare_device")

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self.name} is a declared device function (umd.declare_device): call it "
                        "from a @umd.jit kernel")

    def __repr__(self) -> str:
        return f"<umd.declare_device {self.name} {self.sig!r}>"


def check_links(link, who: str) -> tuple:
    """link= as a tuple of paths; a TypeError naming what is wrong."""
    if link is None:
        return ()
    if isinstance(link, (str, os.PathLike)):
        link = [link]
    if not isinstance(link, (list, tuple)) or not all(isinstance(p, (str, os.PathLike)) for p in link):
        raise LinkError(f"{who}: link= takes a list of file paths, not {link!r}")
    return tuple(os.fspath(p) for p in link)


def resolve_path(path: str, near: str = "") -> str:
    """`path` as given (the working directory's, as Numba's), or else next to `near`
    (the kernel's source file) when it is there."""
    if os.path.isabs(path) or os.path.exists(path) or not near:
        return os.path.abspath(path)
    beside = os.path.join(os.path.dirname(os.path.abspath(near)), path)
    return beside if os.path.exists(beside) else os.path.abspath(path)


_MODULES: dict = {}


def implementation(decl: DeclaredDevice, links: tuple, near: str = ""):
    """The DeviceFunction implementing `decl` in the first of `decl.link` + `links`
    that defines it, or None. A link file that is not Python is a LinkError."""
    for path in decl.link + tuple(links):
        full = resolve_path(path, near)
        if not full.endswith(PYTHON_SUFFIXES):
            raise LinkError(f"link={path!r}: vgpu runs vISA, not PTX or CUDA C, so only Python files "
                            "of @umd.jit(device=True) functions can be linked (docs/umd.md, "
                            "'Linking device functions')")
        if not os.path.exists(full):
            raise LinkError(f"link={path!r}: no such file ({full})")
        stamp = (full, os.stat(full).st_mtime_ns)
        mod = _MODULES.get(stamp)
        if mod is None:
            tag = hashlib.sha256(full.encode()).hexdigest()[:12]
            spec = importlib.util.spec_from_file_location(f"umd_link_{tag}", full)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            _MODULES[stamp] = mod
        fn = getattr(mod, decl.name, None)
        if isinstance(fn, DeviceFunction):
            return fn
        if callable(fn) and hasattr(fn, "__code__"):
            return DeviceFunction(fn, {"device": True})
    return None


def link_digests(options: dict, names: dict, near: str = "") -> dict:
    """{path: SHA-256 of its content} of every file the kernel may link (its link=
    and those of the declarations it names): part of the cache key."""
    paths = list(check_links(options.get("link"), "umd.jit"))
    for v in names.values():
        if isinstance(v, DeclaredDevice):
            paths += v.link
    out = {}
    for p in paths:
        full = resolve_path(p, near)
        try:
            with open(full, "rb") as f:
                out[full] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            out[full] = "missing"
    return out


def declare_device(name: str, sig: str, link=None) -> DeclaredDevice:
    """Numba's `cuda.declare_device(name, sig, link=None)`: a device function kernels
    call by `name`, typed by the Numba signature string `sig`, implemented in a Python
    file of `link` or of the calling kernel's `@umd.jit(link=[...])`."""
    return DeclaredDevice(name, sig, link)
