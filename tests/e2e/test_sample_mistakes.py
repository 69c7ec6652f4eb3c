"""The samples and umd end a user's mistake in one line, as the `vgpu` command does
(issue 24, docs/errors.md; tests/vgpu_tools/test_mistakes.py has the command's):
a wrong --device, no mount, a node or a file a non-root user may not open, a kernel
that does not compile. Each runs the real program and checks a non-zero exit, no
traceback, and the key words of the message."""
from __future__ import annotations

import os
import subprocess
import textwrap

import pytest

from tests.helpers import NOBODY, ROOT, _env, client_python, make_mount_dir

SAMPLES = sorted(n[:-3] for n in os.listdir(os.path.join(ROOT, "samples"))
                 if n.endswith(".py") and n not in ("session.py", "compute_common.py", "sdma_common.py"))
UMD_SAMPLES = [n for n in SAMPLES if n.startswith("umd_")]


def run(argv: list[str], uid: int | None = None, env: dict | None = None,
        cwd: str = ROOT) -> subprocess.CompletedProcess:
    e = _env()
    e.pop("VGPU_DEBUG", None)
    e.update(env or {})

    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return subprocess.run([client_python(uid), *argv], env=e, capture_output=True, text=True, timeout=120,
                          cwd=cwd, preexec_fn=drop if uid is not None else None)


def check(r: subprocess.CompletedProcess, words: list[str], lines: int = 1) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode != 0, (r.returncode, r.stdout, r.stderr)
    for w in words:
        assert w in r.stderr, f"{w!r} not in {r.stderr!r}"
    assert len(r.stderr.strip().splitlines()) == lines, r.stderr


@pytest.fixture(scope="module")
def nowhere():
    path = make_mount_dir()
    yield os.path.join(path, "no-such-mount")
    os.rmdir(path)


@pytest.mark.parametrize("name", SAMPLES)
def test_a_wrong_device(name, nowhere):
    r = run([f"samples/{name}.py", "--device", nowhere])
    check(r, ["no vgpu device at", nowhere, f"vgpu mount {nowhere}"])


@pytest.mark.parametrize("name", UMD_SAMPLES)
def test_no_mount_for_a_umd_sample(name, nowhere):
    r = run([f"samples/{name}.py"], env={"VGPU_MOUNT": nowhere})
    check(r, ["no vgpu device at", f"vgpu mount {nowhere}", "VGPU_MOUNT"])


def test_a_missing_device_argument():
    r = run(["samples/sdma_copy_linear.py"])
    assert r.returncode == 2 and "--device" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.fixture
def as_root():
    if os.geteuid() != 0:
        pytest.skip("needs root to run a sample as nobody")


@pytest.mark.parametrize("name", ["gpu_fault", "sdma_copy_linear"])
def test_card0_as_non_root_points_to_the_render_node(name, vgpu_mount, as_root):
    r = run([os.path.join(ROOT, "samples", f"{name}.py"), "--device", f"{vgpu_mount}/dev/dri/card0"],
            uid=NOBODY, cwd="/")
    check(r, ["card0 is 0660 root:video", f"{vgpu_mount}/dev/dri/renderD128"])


def test_gpu_fault_as_non_root_says_the_dump_is_roots(vgpu_mount, as_root):
    r = run([os.path.join(ROOT, "samples", "gpu_fault.py"), "--device", vgpu_mount], uid=NOBODY, cwd="/")
    check(r, ["devcoredump", "run this sample as root"])


BAD_KERNEL = textwrap.dedent("""\
    import numpy as np
    import umd

    @umd.kernel
    def bad(a):
        i = umd.grid(1)
        a[i] = 1.0

    bad[1, 64](umd.to_device(np.zeros(64, np.float32)))
    """)


def test_a_compile_error_keeps_file_line_and_caret_without_compiler_frames(vgpu_mount, tmp_path):
    script = tmp_path / "bad_kernel.py"
    script.write_text(BAD_KERNEL)
    r = run([str(script)], env={"VGPU_MOUNT": vgpu_mount})
    check(r, [f"{script}:5: bad:", "needs a type annotation", "def bad(a):"], lines=3)
    assert r.stderr.splitlines()[2].strip() == "^" and "umd/compiler" not in r.stderr, r.stderr


def test_vgpu_debug_shows_the_compilers_frames(vgpu_mount, tmp_path):
    script = tmp_path / "bad_kernel.py"
    script.write_text(BAD_KERNEL)
    r = run([str(script)], env={"VGPU_MOUNT": vgpu_mount, "VGPU_DEBUG": "1"})
    assert r.returncode != 0 and "Traceback" in r.stderr and "umd/compiler" in r.stderr, r.stderr
    assert "unknown option" not in r.stderr, r.stderr


def test_memcpy_dtod_takes_arrays_and_refuses_anything_else(vgpu_mount):
    code = textwrap.dedent("""\
        import numpy as np, umd
        d = umd.to_device(np.arange(16, dtype=np.float32))
        c = umd.empty_like(d)
        umd.memcpy_dtod(c, d, d.nbytes)
        print(c.copy_to_host()[:4].tolist())
        umd.memcpy_dtod("c", d, d.nbytes)
        """)
    r = run(["-c", code], env={"VGPU_MOUNT": vgpu_mount, "VGPU_DEBUG": "api"})
    assert r.stdout.strip() == "[0.0, 1.0, 2.0, 3.0]", r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "memcpy_dtod: dst must be a device address" in r.stderr.splitlines()[-1], r.stderr
