"""Shared fixtures. Helpers to import live in tests/helpers.py."""
import os

import pytest

from tests.helpers import daemon_log, make_mount_dir, mount, unmount


@pytest.fixture
def vgpu_mount():
    """A freshly mounted vgpu (64 MiB VRAM) in a directory every uid can reach.

    Always unmounted and its daemon stopped afterwards, even when the test fails;
    the daemon's log is printed at teardown (pytest shows it for failing tests).
    """
    path = make_mount_dir()
    try:
        mount(path, "--vram", "64M")
        yield path
    finally:
        unmount(path)
        log = daemon_log(path)
        if log:
            print(f"--- vgpu daemon log ({path}) ---\n{log}")
        try:
            os.rmdir(path)
        except OSError:
            pass
