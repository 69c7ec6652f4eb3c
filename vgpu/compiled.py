"""Which pure-Python modules `make build` also compiles with Cython, and the import
hook that keeps a compiled module from hiding an edited source.

The CS path's modules (MODULES) are compiled as they are, no line of them written for
Cython, because an ioctl spends most of its time in their interpreter loop
(docs/bench.md, "The CS path compiled"). Python's import system prefers an extension
module to the `.py` beside it, so after an edit the old build would run in silence.
The build records a SHA-256 of each source it compiled (MANIFEST, written by setup.py);
`install()` puts a finder in front of the import system that, for these modules only:

- loads the compiled module when its source is the text it was built from;
- loads the `.py` when the source changed since the build, or when there is no build
  record, and says so once per process on stderr (one line, naming `make build`);
- loads every `.py` when VGPU_COMPILED=0 (as VGPU_HW=ref does for the engines).

Every package holding one of MODULES calls install() before its modules load; a
module not in MODULES is never touched. Nothing here imports the rest of vgpu.
"""
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

#: The modules compiled by setup.py: the ioctl path from FUSE_IOCTL to the ring
#: worker and back, and the client library's half of a submission.
MODULES = (
    "kmd.cs", "kmd.device", "kmd.direct_run", "kmd.fence", "kmd.ioctl", "kmd.irq", "kmd.job",
    "kmd.limits", "kmd.perf", "kmd.residency", "kmd.ring", "kmd.ring_buffer", "kmd.sched",
    "vgpu.pointers", "vdev.ioctl.uaccess", "vdev.ioctl.path", "libvgpu.ioctl", "libvgpu.cs",
)

#: The project's root (the directory holding setup.py and the packages).
ROOT = Path(__file__).resolve().parent.parent
#: {module: sha256 of the source compiled}, written by setup.py after a build.
MANIFEST = ROOT / "vgpu" / "_compiled.json"

#: VGPU_COMPILED=0: every module of MODULES runs as Python.
ENABLED = os.environ.get("VGPU_COMPILED", "1") != "0"


def source_path(name: str) -> Path:
    """The `.py` file of module `name` (one of MODULES) in this tree."""
    return ROOT.joinpath(*name.split(".")).with_suffix(".py")


def source_hash(path: Path) -> str:
    """The hex SHA-256 of a source file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest() -> None:
    """Record the hash of every module's current source (setup.py, after a build)."""
    record = {name: source_hash(source_path(name)) for name in MODULES}
    MANIFEST.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def _read_manifest() -> dict:
    try:
        return json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return {}


class _SourceWhenStale:
    """A meta-path finder for MODULES: the extension when it matches its source,
    the source otherwise."""

    def __init__(self):
        self._recorded = _read_manifest()
        self._said = False

    def find_spec(self, name, path, target=None):
        if name not in MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            return spec
        source = Path(spec.origin).with_name(name.rpartition(".")[2] + ".py")
        if not source.is_file():
            return spec          # an installed build without sources: nothing to compare
        if ENABLED and self._recorded.get(name) == source_hash(source):
            return spec
        if ENABLED:
            self._say(source)
        return importlib.util.spec_from_file_location(name, source)

    def _say(self, source: Path) -> None:
        # Once per process: a test run after an edit would otherwise print a line
        # per module.
        if not self._said:
            self._said = True
            print(f"vgpu: {source.relative_to(ROOT) if source.is_relative_to(ROOT) else source} "
                  "changed since it was compiled; running the Python source "
                  "(`make build` compiles it again)", file=sys.stderr)


def install() -> None:
    """Put the finder first on sys.meta_path (once)."""
    if not any(isinstance(f, _SourceWhenStale) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceWhenStale())


def built() -> list:
    """The extension files of MODULES in this tree (what `make clean` removes)."""
    return [str(so) for name in MODULES for so in source_path(name).parent.glob(name.rpartition(".")[2] + ".*.so")]


def status() -> dict:
    """{module: "compiled" | "python"}: what each module of MODULES imported so far
    runs as in this process (tests/test_compiled.py asks it)."""
    out = {}
    for name in MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        out[name] = "compiled" if str(getattr(module, "__file__", "")).endswith(".so") else "python"
    return out
