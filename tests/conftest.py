"""Shared fixtures. Helpers to import live in tests/helpers.py."""
import os
import shutil
import tempfile

import pytest

from tests.helpers import daemon_log, make_mount_dir, mount, unmount

# `vgpu mount` keeps each mountpoint's daemon log and pid under $VGPU_STATE_DIR (/tmp by
# default) after the unmount, as a user wants. Every test mount is a new directory, so
# the suite keeps its own state directory (sticky and world-writable like /tmp: some
# tests run the CLI as another uid) and removes it at the end.
_STATE_DIR = None
if "VGPU_STATE_DIR" not in os.environ:
    _STATE_DIR = tempfile.mkdtemp(prefix="vgpu-test-state-")
    os.chmod(_STATE_DIR, 0o1777)
    os.environ["VGPU_STATE_DIR"] = _STATE_DIR


def pytest_sessionfinish(session, exitstatus):
    if _STATE_DIR is not None:
        shutil.rmtree(_STATE_DIR, ignore_errors=True)


# Extra `vgpu mount` options for every test mount, to run the suite on another
# hardware model: VGPU_TEST_MOUNT_ARGS=--cache-model runs it with the L2 model on.
_EXTRA_MOUNT_ARGS = os.environ.get("VGPU_TEST_MOUNT_ARGS", "").split()


def _mounted(*args):
    """Mount a fresh vgpu with `args` in a directory every uid can reach; always unmount
    and stop its daemon afterwards, even when the test fails, and print its log."""
    path = make_mount_dir()
    try:
        mount(path, *args, *[a for a in _EXTRA_MOUNT_ARGS if a not in args])
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
def cache_model_mount():
    """A vgpu whose compute engines have the L2 cache model (docs/cache.md)."""
    yield from _mounted("--vram", "64M", "--cache-model")


@pytest.fixture
def short_timeout_mount():
    """A vgpu whose ring timeout is 0.5 s, for hangs and resets."""
    yield from _mounted("--vram", "64M", "--timeout", "0.5")


@pytest.fixture
def partitions_mount():
    """A vgpu split into 2 partitions (card0/renderD128, card1/renderD129), ring
    timeout 0.5 s, for hangs in one partition."""
    yield from _mounted("--vram", "64M", "--timeout", "0.5", "--partitions", "2")
