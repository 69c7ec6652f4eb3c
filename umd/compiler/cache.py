"""The on-disk kernel cache (docs/umd-compiler.md 8).

~/.cache/vgpu/kernels by default, VGPU_CACHE_DIR overrides it.  One entry is
<key>.vco (the code object) and <key>.json (CompiledKernel's other fields).  The key is
the SHA-256 of the kernel's source text, the values of the module-level constants it
names, the sources and constants of the device functions it may call (and of theirs),
the compiler's own kernel-language library, the compile options, the vISA version, the
compiler version and a digest of the compiler's and the assembler's source files (so a
changed compiler never reuses another's entries, whatever its version number): any of
them changing makes a new entry.  Hits and misses are logged under VGPU_DEBUG=cache.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from vgpu import isa

from .compiled import CompiledKernel
from .debug import debug_log
from .functions import DeviceFunction


def cache_dir() -> Path:
    env = os.environ.get("VGPU_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "vgpu" / "kernels"


def _names(pyfn, env: dict | None) -> dict:
    """The objects the names a function uses stand for (closure, decorating frame,
    globals)."""
    closure = {}
    if pyfn.__closure__:
        for n, cell in zip(pyfn.__code__.co_freevars, pyfn.__closure__):
            try:
                closure[n] = cell.cell_contents
            except ValueError:
                pass
    out = {}
    missing = object()
    for n in sorted(set(pyfn.__code__.co_names) | set(pyfn.__code__.co_freevars)):
        for where in (closure, env or {}, pyfn.__globals__):
            v = where.get(n, missing)
            if v is not missing:
                out[n] = v
                break
    return out


def _constants(pyfn, env: dict | None = None) -> dict:
    """Module-level numbers the kernel names: they are compiled in as constants; so are
    the numpy arrays it may freeze with umd.const.array_like (by content); device arrays
    it captures, by dtype and dimensions."""
    out = {}
    for n, v in _names(pyfn, env).items():
        if isinstance(v, (bool, int, float, tuple)):
            out[n] = repr(v)
        elif isinstance(v, np.ndarray):
            data = np.ascontiguousarray(v)
            out[n] = f"ndarray {data.dtype} {data.shape} {hashlib.sha256(data.tobytes()).hexdigest()}"
        elif hasattr(v, "__cuda_array_interface__") and hasattr(v, "dtype"):
            # a captured device array: its type is compiled in, its memory is the launch's
            out[n] = f"device array {np.dtype(v.dtype)} {len(getattr(v, 'shape', ()))}-D"
    return out


def _device_functions(pyfn, env: dict | None, seen: dict) -> None:
    """The device functions `pyfn` may call (by name, or as an attribute of a module
    it names), with theirs: their sources and constants are part of the key."""
    names = _names(pyfn, env)
    attrs = set(pyfn.__code__.co_names)
    candidates = list(names.values())
    for v in names.values():
        if inspect.ismodule(v):
            candidates += [getattr(v, a) for a in attrs if hasattr(v, a)]
    for v in candidates:
        if isinstance(v, DeviceFunction):
            key = f"{v.fn.__module__}.{v.fn.__qualname__}"
            if key not in seen:
                seen[key] = None
                seen[key] = {"source": _source(v.fn), "constants": _constants(v.fn, v.env)}
                _device_functions(v.fn, v.env, seen)


def _source(pyfn) -> str:
    try:
        return inspect.getsource(pyfn)
    except (OSError, TypeError):
        return repr(pyfn.__code__.co_code)


_COMPILER_DIGEST: str | None = None


def compiler_digest() -> str:
    """SHA-256 of the compiler's own source files and of the vISA tables and
    assembler it emits for (umd/compiler/*.py, vgpu/isa.py, vgpu/asm.py), read once
    per process (about a millisecond). Part of every key: two checkouts whose
    compilers differ never share an entry, even with the same COMPILER_VERSION (two
    branches that both bumped it once handed each other code with opcodes the other
    did not know)."""
    global _COMPILER_DIGEST
    if _COMPILER_DIGEST is None:
        h = hashlib.sha256()
        here = Path(__file__).resolve().parent
        for path in sorted(here.glob("*.py")) + [Path(isa.__file__).resolve(),
                                                 Path(isa.__file__).resolve().with_name("asm.py")]:
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        _COMPILER_DIGEST = h.hexdigest()
    return _COMPILER_DIGEST


def cache_key(pyfn, options: dict, compiler_version: int, env: dict | None = None) -> str:
    from . import libdevice
    device: dict = {}
    _device_functions(pyfn, env, device)
    from . import linking
    links = linking.link_digests(options, _names(pyfn, env), getattr(pyfn.__code__, "co_filename", ""))
    blob = json.dumps({"source": _source(pyfn), "constants": _constants(pyfn, env), "links": links,
                       "device_functions": device, "library": inspect.getsource(libdevice),
                       "options": {k: repr(v) for k, v in sorted(options.items())},
                       "isa": isa.ISA_VERSION, "compiler": compiler_version,
                       "compiler_sources": compiler_digest()},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def load(key: str, name: str) -> CompiledKernel | None:
    """The cached kernel of ``key`` (``name`` is for the log), or None on a miss."""
    d = cache_dir()
    try:
        meta = json.loads((d / f"{key}.json").read_text())
        code = (d / f"{key}.vco").read_bytes()
        compiled = CompiledKernel.from_json(meta, code)
    except (OSError, ValueError, TypeError, KeyError):
        debug_log("cache", f"miss {name} (key {key[:16]}, {d})")
        return None
    debug_log("cache", f"hit {name} (key {key[:16]}, {d})")
    return compiled


def store(key: str, compiled: CompiledKernel) -> None:
    """Write both files atomically (rename), the code object first: a reader that sees
    the JSON also sees the code.  A cache that cannot be written is not an error."""
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        for suffix, data in ((".vco", compiled.code_object),
                             (".json", json.dumps(compiled.to_json()).encode())):
            fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key[:16]}")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, d / f"{key}{suffix}")
    except OSError as e:
        debug_log("cache", f"cannot write {d}: {e}")
