"""Shared fixtures. Helpers to import live in tests/helpers.py."""
import os

import pytest

from tests.helpers import daemon_log, make_mount_dir, mount, unmount


def _mounted(*args):
    """Mount a fresh vgpu with `args` in a directory every uid can reach; always unmount
    and stop its daemon afterwards, even when the test fails, and print its log."""
    path = make_mount_dir()
    try:
        mount(path, *args)
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


@pytest.fixture
def vgpu_mount():
    """A freshly mounted vgpu (64 MiB VRAM)."""
    yield from _mounted("--vram", "64M")


@pytest.fixture
def long_timeout_mount():
    """A vgpu whose ring timeout is 10 s: a kernel may run for seconds."""
    yield from _mounted("--vram", "64M", "--timeout", "10")


@pytest.fixture
def short_timeout_mount():
    """A vgpu whose ring timeout is 0.5 s, for hangs and resets."""
    yield from _mounted("--vram", "64M", "--timeout", "0.5")
