"""The on-disk kernel cache (docs/umd-compiler.md 8).

~/.cache/vgpu/kernels by default, VGPU_CACHE_DIR overrides it.  One entry is
<key>.vco (the code object) and <key>.json (CompiledKernel's other fields).  The key is
the SHA-256 of the kernel's source text, the values of the module-level constants it
names, the compile options, the vISA version and the compiler version: any of them
changing makes a new entry.  Hits and misses are logged under VGPU_DEBUG=cache.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
from pathlib import Path

from vgpu import isa

from .compiled import CompiledKernel
from .debug import debug_log


def cache_dir() -> Path:
    env = os.environ.get("VGPU_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "vgpu" / "kernels"


def _constants(pyfn) -> dict:
    """Module-level numbers the kernel names: they are compiled in as constants."""
    out = {}
    names = set(pyfn.__code__.co_names) | set(pyfn.__code__.co_freevars)
    closure = {}
    if pyfn.__closure__:
        for n, cell in zip(pyfn.__code__.co_freevars, pyfn.__closure__):
            try:
                closure[n] = cell.cell_contents
            except ValueError:
                pass
    for n in sorted(names):
        v = closure.get(n, pyfn.__globals__.get(n))
        if isinstance(v, (bool, int, float)):
            out[n] = repr(v)
    return out


def cache_key(pyfn, options: dict, compiler_version: int) -> str:
    try:
        source = inspect.getsource(pyfn)
    except (OSError, TypeError):
        source = repr(pyfn.__code__.co_code)
    blob = json.dumps({"source": source, "constants": _constants(pyfn),
                       "options": {k: repr(v) for k, v in sorted(options.items())},
                       "isa": isa.ISA_VERSION, "compiler": compiler_version},
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
