"""What `make build` leaves in the tree: extension modules only where the source is
Cython (.pyx), never one beside a .py of the same name, which Python would import
in its place (the CS path's modules were compiled until 2026-12-04; `make build`
removes such leftovers, docs/bench.md "The CS path compiled, measured again")."""
import importlib
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kmd", "vdev", "vgpu", "libvgpu", "umd", "vgpu_tools")


def _shadowing(root: Path) -> list[Path]:
    return [so for package in PACKAGES for so in (root / package).rglob("*.cpython-*.so")
            if so.with_name(so.name.split(".")[0] + ".py").is_file()]


def test_no_extension_module_hides_a_python_source():
    assert _shadowing(ROOT) == []


def test_the_cs_path_runs_its_python_sources():
    for name in ("kmd.ring", "kmd.device", "kmd.cs", "vdev.ioctl.path", "vgpu.pointers", "libvgpu.ioctl"):
        assert importlib.import_module(name).__file__.endswith(".py"), name


def test_make_build_removes_a_leftover_extension(tmp_path):
    # The Makefile's own loop, run on a copy of the layout: a stale ring.so beside
    # ring.py goes, the core's .so (its source is .pyx) stays.
    (tmp_path / "kmd" / "hw").mkdir(parents=True)
    for package in ("vdev", "vgpu", "libvgpu"):
        (tmp_path / package).mkdir()
    (tmp_path / "kmd" / "ring.py").write_text("")
    stale = tmp_path / "kmd" / "ring.cpython-311-x86_64-linux-gnu.so"
    core = tmp_path / "kmd" / "hw" / "_core.cpython-311-x86_64-linux-gnu.so"
    stale.write_bytes(b"")
    core.write_bytes(b"")
    recipe = (ROOT / "Makefile").read_text().split("build: deps\n", 1)[1].split("\n\t$(PYTHON)", 1)[0]
    script = recipe.replace("\\\n", "").replace("\t", "").lstrip("@").replace("$$", "$")
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert not stale.exists() and core.exists()
    assert "it would hide kmd/ring.py" in out.stdout
    assert _shadowing(tmp_path) == []
