"""The Cython core's compiled-in numbers agree with the Python definitions."""
from kmd.hw import _core, ih, mmu, sdma


def test_compiled_numbers_match_python():
    for name, value in _core.COMPILED_DEFS.items():
        source = next(m for m in (sdma, ih, mmu) if hasattr(m, name))
        assert getattr(source, name) == value, name


def test_selector_exports_the_same_api(monkeypatch):
    import importlib

    import kmd.hw
    for impl, mod in (("ref", "kmd.hw.ref"), ("", "kmd.hw._core")):
        monkeypatch.setenv("VGPU_HW", impl)
        hw = importlib.reload(kmd.hw)
        assert hw.PageTable.__module__ == mod and hw.SdmaEngine.__module__ == mod
        assert (hw.PTE_READ, hw.PTE_WRITE, hw.PTE_EXEC) == (2, 4, 8)
    monkeypatch.delenv("VGPU_HW")
    importlib.reload(kmd.hw)
