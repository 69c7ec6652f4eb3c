"""vdev/options.py: the daemon's options that `vgpu mount` passes on (the poll
window of the ioctl thread here; the node modes are in test_permissions.py)."""
import argparse

import pytest

from vdev.options import DEFAULT_POLL_US, add_device_options, device_argv


def _parse(*argv):
    p = argparse.ArgumentParser(exit_on_error=False)
    add_device_options(p)
    return p.parse_args(list(argv))


def test_the_poll_window_defaults_and_is_passed_on_only_when_changed():
    assert _parse().poll_us == DEFAULT_POLL_US
    assert "--poll-us" not in device_argv(_parse())
    args = _parse("--poll-us", "0")
    assert args.poll_us == 0
    assert device_argv(args)[-2:] == ["--poll-us", "0"]


@pytest.mark.parametrize("bad, says", [("-1", "out of range"), ("100001", "out of range"),
                                       ("1.5", "not a number"), ("soon", "not a number")])
def test_a_bad_poll_window_is_a_one_line_error(bad, says):
    with pytest.raises(argparse.ArgumentError, match=says):
        _parse("--poll-us", bad)
