"""vgpu.compiled: the CS path's modules run compiled after `make build`, an edited
source runs as Python with one line saying so, and VGPU_COMPILED=0 runs them all as
Python. Each case imports in a fresh interpreter, as a user's process would."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vgpu import compiled

ROOT = compiled.ROOT
REPORT = "import json, kmd.device, vdev.ioctl.path, libvgpu, vgpu.compiled as c; print(json.dumps(c.status()))"


def _run(code, cwd=ROOT, **env):
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(cwd), **env})
    assert out.returncode == 0, out.stderr
    return out


def _built():
    return compiled.MANIFEST.is_file() and any(ROOT.glob("kmd/ring.*.so"))


needs_build = pytest.mark.skipif("not _built()", reason="needs `make build` (compiled modules)")


@needs_build
def test_after_a_build_every_module_runs_compiled_and_nothing_is_said():
    out = _run(REPORT)
    status = json.loads(out.stdout)
    assert set(status) == set(compiled.MODULES)
    assert set(status.values()) == {"compiled"}, status
    assert out.stderr == ""


def test_vgpu_compiled_0_runs_every_module_as_python_in_silence():
    out = _run(REPORT, VGPU_COMPILED="0")
    assert set(json.loads(out.stdout).values()) == {"python"}
    assert out.stderr == ""


@pytest.fixture
def tree_copy(tmp_path):
    """A copy of vgpu/ and kmd/ with their builds, where a source may be edited."""
    for package in ("vgpu", "kmd"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@needs_build
def test_an_edited_source_runs_as_python_and_one_line_names_it_and_make_build(tree_copy):
    probe = "import kmd.limits, kmd.ring; print(kmd.limits.__file__); print(kmd.ring.__file__)"
    before = _run(probe, cwd=tree_copy).stdout.split()
    assert all(path.endswith(".so") for path in before), before

    with open(tree_copy / "kmd/limits.py", "a") as f:
        f.write("\nEDITED = True\n")
    with open(tree_copy / "kmd/ring.py", "a") as f:
        f.write("\n# edited\n")
    out = _run(probe + "; print(kmd.limits.EDITED)", cwd=tree_copy)
    limits, ring, edited = out.stdout.split()
    assert limits.endswith("kmd/limits.py") and ring.endswith("kmd/ring.py") and edited == "True"
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr          # one line for all the stale modules
    assert "changed since it was compiled" in lines[0] and "make build" in lines[0]
    assert "Traceback" not in out.stderr


@needs_build
def test_no_build_record_means_python_not_a_guess(tree_copy):
    (tree_copy / "vgpu/_compiled.json").unlink()
    out = _run("import kmd.fence; print(kmd.fence.__file__)", cwd=tree_copy)
    assert out.stdout.strip().endswith("kmd/fence.py")
    assert len(out.stderr.splitlines()) == 1


def test_the_record_holds_the_hash_of_each_source(tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "MANIFEST", tmp_path / "record.json")
    compiled.write_manifest()
    record = json.loads((tmp_path / "record.json").read_text())
    assert set(record) == set(compiled.MODULES)
    assert record["kmd.ring"] == compiled.source_hash(ROOT / "kmd/ring.py")


def test_every_listed_module_has_a_source_and_each_package_installs_the_finder_first():
    for name in compiled.MODULES:
        assert compiled.source_path(name).is_file(), name
    for package in {name.split(".")[0] for name in compiled.MODULES}:
        text = (ROOT / package / "__init__.py").read_text()
        assert "_compiled.install()" in text, package
