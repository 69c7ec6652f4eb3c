"""vgpu/uapi.py against the real C headers (drm.h, amdgpu_drm.h, include/vgpu_drm.h).

A C program is generated from the Python definitions: it prints sizeof of every
struct and union, offsetof and sizeof of every field (nested and anonymous
members too) and the value of every constant the module exports. gcc compiles
it against include/vgpu_drm.h; any difference fails the test.
"""

from __future__ import annotations

import ctypes
import keyword
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vgpu import uapi

ROOT = Path(__file__).resolve().parents[1]
LIBDRM_INCLUDE = Path("/usr/include/libdrm")
CONSTANT_PREFIXES = ("DRM_", "AMDGPU_", "VGPU_", "_IOC_")

needs_gcc = pytest.mark.skipif(
    shutil.which("gcc") is None or not (LIBDRM_INCLUDE / "amdgpu_drm.h").exists(),
    reason="needs gcc and libdrm-dev headers in /usr/include/libdrm (apt-get install gcc libdrm-dev)",
)


def _is_record(t) -> bool:
    return isinstance(t, type) and issubclass(t, (ctypes.Structure, ctypes.Union))


def _c_type(cls) -> str:
    return ("union " if issubclass(cls, ctypes.Union) else "struct ") + cls.__name__


def _c_name(field: str) -> str:
    # A C member named after a Python keyword carries a trailing underscore here.
    if field.endswith("_") and keyword.iskeyword(field[:-1]):
        return field[:-1]
    return field


def public_records() -> list[type]:
    """Every struct/union the module defines under its C name (helpers for
    anonymous C members start with '_' and are reached through their parent)."""
    return [v for k, v in vars(uapi).items()
            if _is_record(v) and not k.startswith("_") and v.__module__ == uapi.__name__]


def public_constants() -> dict[str, int]:
    return {k: v for k, v in vars(uapi).items()
            if k.startswith(CONSTANT_PREFIXES) and isinstance(v, int) and not isinstance(v, bool)}


def _walk(cls, prefix: str, base: int, out: list[tuple[str, int, int]]) -> None:
    """Collect (C member path, offset, size) for every field below ``cls``."""
    anonymous = set(getattr(cls, "_anonymous_", ()))
    for name, ftype, *_ in cls._fields_:
        offset = base + getattr(cls, name).offset
        if name in anonymous:  # C anonymous union/struct: its members sit in the parent
            _walk(ftype, prefix, offset, out)
            continue
        path = prefix + _c_name(name)
        out.append((path, offset, ctypes.sizeof(ftype)))
        if _is_record(ftype):
            _walk(ftype, path + ".", offset, out)
        elif issubclass(ftype, ctypes.Array) and _is_record(ftype._type_):
            _walk(ftype._type_, path + "[0].", offset, out)


def expected_layout() -> dict[str, int]:
    expected: dict[str, int] = {}
    for cls in public_records():
        ct = _c_type(cls)
        expected[f"sizeof {ct}"] = ctypes.sizeof(cls)
        fields: list[tuple[str, int, int]] = []
        _walk(cls, "", 0, fields)
        for path, offset, size in fields:
            expected[f"offsetof {ct} {path}"] = offset
            expected[f"sizeof {ct} {path}"] = size
    return expected


def generate_c_program() -> str:
    lines = [
        "#include <stdio.h>",
        "#include <stddef.h>",
        "#include <fcntl.h>",
        '#include "vgpu_drm.h"',
        "int main(void)",
        "{",
    ]
    for cls in public_records():
        ct = _c_type(cls)
        lines.append(f'\tprintf("sizeof {ct}=%zu\\n", sizeof({ct}));')
        fields: list[tuple[str, int, int]] = []
        _walk(cls, "", 0, fields)
        for path, _, _ in fields:
            lines.append(f'\tprintf("offsetof {ct} {path}=%zu\\n", offsetof({ct}, {path}));')
            lines.append(f'\tprintf("sizeof {ct} {path}=%zu\\n", sizeof((({ct} *)0)->{path}));')
    for name in public_constants():
        lines += [f"#ifdef {name}",
                  f'\tprintf("const {name}=%lld\\n", (long long)({name}));',
                  "#endif"]
    lines += ["\treturn 0;", "}"]
    return "\n".join(lines) + "\n"


def run_c_program(tmp_path: Path) -> dict[str, int]:
    src = tmp_path / "uapi_check.c"
    exe = tmp_path / "uapi_check"
    src.write_text(generate_c_program())
    cc = subprocess.run(
        ["gcc", "-Wall", "-Werror", f"-I{LIBDRM_INCLUDE}", f"-I{ROOT / 'include'}",
         "-o", str(exe), str(src)],
        capture_output=True, text=True)
    assert cc.returncode == 0, f"C program does not compile (a struct or field the headers lack?):\n{cc.stderr[-4000:]}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    result = {}
    for line in run.stdout.splitlines():
        key, _, value = line.rpartition("=")
        result[key] = int(value)
    return result


@needs_gcc
def test_layouts_and_numbers_match_c_headers(tmp_path):
    c = run_c_program(tmp_path)

    expected = expected_layout()
    layout_diff = {k: (v, c.get(k)) for k, v in expected.items() if c.get(k) != v}
    assert not layout_diff, "layout differs from C (python, C):\n" + "\n".join(
        f"  {k}: {v}" for k, v in sorted(layout_diff.items()))

    constants = public_constants()
    missing = sorted(k for k in constants if f"const {k}" not in c)
    assert not missing, f"constants not defined by the C headers (add them to include/vgpu_drm.h): {missing}"
    value_diff = {k: (v, c[f"const {k}"]) for k, v in constants.items() if c[f"const {k}"] != v}
    assert not value_diff, "constants differ from C (python, C):\n" + "\n".join(
        f"  {k}: {v[0]:#x} != {v[1]:#x}" for k, v in sorted(value_diff.items()))

    # The check really covered the module.
    assert sum(k.startswith("const DRM_IOCTL_") for k in c) == len(uapi.IOCTLS) + 1  # + DRM_IOCTL_BASE
    assert len(public_records()) >= 60


def test_ioctl_table_is_consistent():
    assert uapi.IOCTLS, "empty ioctl table"
    for nr, d in uapi.IOCTLS.items():
        assert uapi._IOC_NR(d.request) == nr
        assert uapi._IOC_TYPE(d.request) == uapi.DRM_IOCTL_BASE
        assert uapi._IOC_SIZE(d.request) == ctypes.sizeof(d.struct), d.name
        assert getattr(uapi, "DRM_IOCTL_" + d.name) == d.request
    names = {d.name for d in uapi.IOCTLS.values()}
    for required in ("VERSION", "GET_CAP", "GEM_CLOSE", "SYNCOBJ_WAIT", "SYNCOBJ_TIMELINE_SIGNAL",
                     "AMDGPU_GEM_CREATE", "AMDGPU_CS", "AMDGPU_INFO", "AMDGPU_GEM_VA",
                     "AMDGPU_WAIT_FENCES", "AMDGPU_GEM_OP"):
        assert required in names
    # Direction bits as the headers declare them (libdrm relies on nothing else).
    assert uapi._IOC_DIR(uapi.DRM_IOCTL_AMDGPU_GEM_VA) == uapi._IOC_WRITE
    assert uapi._IOC_DIR(uapi.DRM_IOCTL_AMDGPU_INFO) == uapi._IOC_WRITE
    assert uapi._IOC_DIR(uapi.DRM_IOCTL_AMDGPU_CS) == uapi._IOC_READ | uapi._IOC_WRITE
    assert uapi.ioctl_name(uapi.DRM_IOCTL_AMDGPU_CS) == "AMDGPU_CS"
    assert uapi.ioctl_name(0x1234) == "0x00001234"


def test_framing_and_helpers():
    assert ctypes.sizeof(uapi.vgpu_request_header) == 16
    assert ctypes.sizeof(uapi.vgpu_reply_header) == 16
    assert uapi.VGPU_MAGIC.to_bytes(4, "little") == b"VGPU"
    # Short input is zero-extended, long input cut (drm_ioctl semantics).
    s = uapi.drm_gem_close.from_bytes(b"\x05")
    assert (s.handle, s.pad) == (5, 0)
    assert bytes(uapi.drm_gem_close.from_bytes(bytes(range(12)))) == bytes(range(8))
    u = uapi.drm_amdgpu_gem_create.from_bytes((7).to_bytes(8, "little"))
    assert type(u) is uapi.drm_amdgpu_gem_create and u.in_.bo_size == 7 and u.out.handle == 7
    # Anonymous unions reach their members as in C; 'in' is spelled 'in_'.
    info = uapi.drm_amdgpu_info(query=uapi.AMDGPU_INFO_HW_IP_INFO)
    info.query_hw_ip.type = uapi.AMDGPU_HW_IP_DMA
    assert bytes(info)[16:20] == b"\x02\0\0\0"
    gc = uapi.drm_amdgpu_gem_create()
    gc.in_.bo_size = 4096
    assert bytes(gc)[:8] == (4096).to_bytes(8, "little")
