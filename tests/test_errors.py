"""vgpu/errors.py: the one error path of every entry point (docs/errors.md)."""
import errno

import pytest

from vgpu.errors import INTERRUPTED, UserError, describe, run_main


@pytest.fixture(autouse=True)
def no_debug(monkeypatch):
    monkeypatch.delenv("VGPU_DEBUG", raising=False)


def fail(exc):
    def main():
        raise exc
    return main


def test_a_user_error_is_one_line_with_its_status(capsys):
    assert run_main(fail(UserError("--vram 1: what to do", status=2)), "vgpu mount") == 2
    assert capsys.readouterr().err == "vgpu mount: --vram 1: what to do\n"


def test_an_oserror_names_its_file_and_what_to_do():
    assert describe(FileNotFoundError(errno.ENOENT, "No such file or directory", "/x.json")) == \
        "/x.json: No such file or directory"
    dead = describe(OSError(errno.ENOTCONN, "Transport endpoint is not connected", "/tmp/nowhere/dev/kmsg"))
    assert "is dead" in dead and "vgpu umount" in dead
    card0 = describe(PermissionError(errno.EACCES, "Permission denied", "/m/dev/dri/card0"))
    assert "renderD128" in card0


def test_a_bug_keeps_its_traceback():
    with pytest.raises(ZeroDivisionError):
        run_main(fail(ZeroDivisionError()), "vgpu")


def test_vgpu_debug_shows_the_traceback_of_a_mistake(monkeypatch):
    monkeypatch.setenv("VGPU_DEBUG", "api,traceback")
    with pytest.raises(UserError):
        run_main(fail(UserError("x")), "vgpu")


def test_ctrl_c_and_a_closed_pipe_end_quietly(capsys):
    assert run_main(fail(KeyboardInterrupt()), "vgpu") == INTERRUPTED
    assert capsys.readouterr().err == "\n"
    assert run_main(lambda: 0, "vgpu") == 0 and run_main(lambda: None, "vgpu") == 0


def test_a_message_with_its_own_place_is_not_prefixed(capsys):
    class Located(UserError):
        prefixed = False
    run_main(fail(Located("k.py:3: k: bad")), "k.py")
    assert capsys.readouterr().err == "k.py:3: k: bad\n"
