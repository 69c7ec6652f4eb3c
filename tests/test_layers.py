"""The layering of docs/architecture.md, checked on the source: who may import whom,
and no import cycle between modules. Reads the files with ast; imports nothing."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("vgpu", "vgpu_tools", "vdev", "kmd", "libvgpu", "umd", "samples")

# layer -> the top-level packages it must never import (docs/architecture.md).
FORBIDDEN = {
    "vgpu": {"vgpu_tools", "vdev", "kmd", "libvgpu", "umd", "samples"},   # the contract: a leaf
    "kmd": {"vgpu_tools", "vdev", "libvgpu", "umd", "samples"},
    "vdev": {"vgpu_tools", "libvgpu", "umd", "samples"},
    "libvgpu": {"vgpu_tools", "vdev", "kmd", "umd", "samples"},
    "umd": {"vgpu_tools", "vdev", "kmd", "samples"},
    "samples": {"vgpu_tools", "vdev", "kmd"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "__pycache__" not in path.parts:
                found[_module_name(path)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules imported by module `name` (relative imports resolved; a
    `from pkg import mod` that names a module counts as importing that module)."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                prefix = base[:len(base) - node.level + 1]
                mod = ".".join(prefix + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def test_layers_import_only_downwards(graph):
    bad = [f"{m} imports {t}" for m, targets in graph.items() for t in targets
           if t.split(".")[0] in FORBIDDEN.get(m.split(".")[0], ())]
    assert not bad, "\n".join(sorted(bad))


def test_kmd_hw_never_imports_the_rest_of_kmd(graph):
    bad = [f"{m} imports {t}" for m, targets in graph.items() if m.startswith("kmd.hw")
           for t in targets if t.startswith("kmd.") and not t.startswith("kmd.hw") and t != "kmd"]
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycles(graph):
    # Tarjan's strongly connected components; a component of two or more modules is a cycle.
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_frame_magic_lives_in_the_contract_and_its_codec():
    users = sorted(str(p.relative_to(ROOT)) for p in _modules().values() if "VGPU_MAGIC" in p.read_text())
    assert users == ["vgpu/frame.py", "vgpu/uapi.py"]
