"""End to end: the tools driver engineers use on a real amdgpu, unmodified, through
`vgpu run` while a compute load runs (docs/libdrm.md, "Tools that work"):
radeontop (Debian main), nvtop (Debian contrib, unpacked from its .deb into the test's
own scratch directory, never into the tree) and drm_info. The load is a separate
process: the spinning kernel of tests/e2e/test_smi_e2e.py, on a mount whose ring
timeout outlasts it."""
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from tests.helpers import ROOT, make_mount_dir, mount, start_client, unmount, vgpu_cli
from vgpu.paths import PCI_SLOT

from .test_smi_e2e import SPIN

LIBRARY = os.path.join(ROOT, "preload", "libvgpu_preload.so")
NVTOP_DEB = "http://deb.debian.org/debian/pool/contrib/n/nvtop/nvtop_3.0.1-1_amd64.deb"
pytestmark = pytest.mark.skipif(not os.path.isfile(LIBRARY), reason=f"{LIBRARY} is not built (make build)")


@pytest.fixture(scope="module")
def tools_mount():
    path = make_mount_dir()
    try:
        mount(path, "--vram", "256M", "--timeout", "60")
        yield path
    finally:
        unmount(path)
        os.rmdir(path)


def _load(mount, code):
    client = start_client(code, mount=mount)
    try:
        assert client.stdout.readline().strip() == "running"
        time.sleep(1.5)  # a whole busy window (kmd/perf.py BUSY_WINDOW) of load
        yield client
    finally:
        client.stdin.write("\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "done"
        client.wait(timeout=30)


@pytest.fixture
def load(tools_mount):
    """A client process whose kernel keeps the GPU busy until the test ends (on a
    compute user queue: umd's default)."""
    yield from _load(tools_mount, SPIN)


@pytest.fixture
def cs_load(tools_mount):
    """The same kernel on the compute ring (umd on CS, VGPU_USERQ=0). nvtop's process
    share of a user-queue load read 0 % in some runs under load (its device figure
    too, after a first 100 %): not understood yet, so nvtop's test uses the ring."""
    yield from _load(tools_mount, "import os; os.environ['VGPU_USERQ'] = '0'\n" + SPIN)


RADEONTOP_LINE = re.compile(r"^\d+\.\d+: bus [0-9a-f]{2}, (.*)$")


@pytest.mark.skipif(shutil.which("radeontop") is None, reason="radeontop missing (Debian radeontop; make deps)")
def test_radeontop_sees_the_compute_load(tools_mount, load):
    r = vgpu_cli("run", "--mount", tools_mount, "--", "radeontop", "-d", "-", "-l", "3", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Dumping to -, line limit 3.", r.stdout
    samples = [RADEONTOP_LINE.match(line) for line in lines[1:]]
    assert len(samples) == 3 and all(samples), r.stdout
    assert r.stderr == "", r.stderr    # no "Failed to get shader clock" or other error line
    for m in samples:
        fields = dict(re.findall(r"(\w+) ([\d.]+)%", m.group(1)))
        clocks = dict(re.findall(r"(sclk|mclk) [\d.]+% ([\d.]+)ghz", m.group(1)))
        assert float(fields["gpu"]) > 50, m.group(0)
        assert float(clocks["sclk"]) > 0 and float(clocks["mclk"]) > 0, m.group(0)
        # a compute wave keeps the SPI and the texture addresser busy (GRBM_STATUS)
        assert float(fields["spi"]) > 50 and float(fields["ta"]) > 50, m.group(0)


@pytest.fixture(scope="module")
def nvtop(tmp_path_factory):
    """Debian bookworm's nvtop 3.0.1, unpacked into a scratch directory."""
    scratch = tmp_path_factory.mktemp("nvtop")
    deb = scratch / "nvtop.deb"
    try:
        with urllib.request.urlopen(NVTOP_DEB, timeout=60) as response:
            deb.write_bytes(response.read())
        subprocess.run(["dpkg-deb", "-x", str(deb), str(scratch / "root")], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"nvtop could not be had from {NVTOP_DEB}: {e}")
    return str(scratch / "root/usr/bin/nvtop")


def screen_of(cmd: list[str], seconds: float, repaint_every: float | None = None) -> str:
    """What `cmd` writes to a 160x50 pseudo-terminal in `seconds`, escape codes removed;
    two seconds before the end the terminal grows a column, so that the screen is
    painted anew in full (curses otherwise writes only the cells that change).
    `repaint_every`: change the size every so many seconds instead, so that every
    refresh's values are painted in full, not only the last one's."""
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(TERM="xterm", COLUMNS="160", LINES="50")
        os.chdir(ROOT)
        os.execvp(cmd[0], cmd)
    import fcntl
    import struct
    import termios
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    out, start = b"", time.monotonic()
    resized = False
    repaints = 0
    try:
        while time.monotonic() < start + seconds:
            if repaint_every is not None and time.monotonic() > start + (repaints + 1) * repaint_every:
                repaints += 1
                fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160 + repaints % 2, 0, 0))
                os.kill(pid, signal.SIGWINCH)
            elif repaint_every is None and not resized and time.monotonic() > start + seconds - 2:
                # a new size makes curses repaint the whole screen: the last values in full
                fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 161, 0, 0))
                os.kill(pid, signal.SIGWINCH)
                resized = True
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    out += os.read(fd, 65536)
                except OSError:
                    break
        os.write(fd, b"q")   # nvtop quits on q
        time.sleep(0.5)
    finally:
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
    text = out.decode(errors="replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0B]|\x1b[=>]", " ", text)
    return re.sub(r"[ \t]+", " ", text)


def test_nvtop_shows_the_mi100_its_load_and_the_loads_process(tools_mount, cs_load, nvtop):
    load = cs_load
    import sys
    # painted in full at each refresh: nvtop drops about one refresh's share in two
    # (see the user-queue twin below)
    screen = screen_of([sys.executable, "-m", "vgpu_tools", "run", "--mount", tools_mount, "--",
                        nvtop, "-d", "5"], 10, repaint_every=0.37)
    assert "Assertion" not in screen, screen
    assert "[AMD Instinct MI100]" in screen, screen
    assert re.search(r"GPU \d+MHz MEM \d+MHz", screen), screen
    assert re.search(r"MEM \[[| ]*[\d.]+[KM]i/256\.000Mi ?\]", screen), screen   # INFO MEMORY's VRAM
    # the utilisation bar fills (a 100 % busy ring)
    util = [int(u) for u in re.findall(r"GPU \[[| ]*(\d+)% ?\]", screen)]
    assert util and max(util) > 50, screen
    # the process list: the load's pid, a compute process (from its fdinfo's drm-engine-compute)
    shares = [int(x) for x in re.findall(rf"\b{load.pid} root \d+ Compute (\d+)%", screen)]
    assert shares, screen
    # its share of the GPU: the growth of drm-engine-compute between two refreshes
    assert max(shares) > 50, screen


def test_nvtop_shows_the_mi100s_pcie_4_x16_link(tools_mount, nvtop):
    """nvtop takes the link from the GPU's parents bound to pcieport, the smallest
    current_link_speed and current_link_width among them (device_discovery_linux.c,
    pcie_walker_helper; with none, UINT_MAX: "GEN 0@4294967295x"), the speed as a
    generation (extract_gpuinfo.c: 16 GT/s is 4), and prints "PCIe GEN %u@%2ux"
    (interface.c): here the root port above the GPU, PCIe 4.0 x16 as an MI100's."""
    import sys
    screen = screen_of([sys.executable, "-m", "vgpu_tools", "run", "--mount", tools_mount, "--",
                        nvtop, "-d", "5"], 5)
    assert "Assertion" not in screen, screen
    assert re.search(r"Device 0 \[AMD Instinct MI100\] PCIe GEN 4@16x RX: ", screen), screen
    assert "4294967295" not in screen and "GEN 0@" not in screen, screen


def test_nvtop_shows_a_user_queue_loads_process_share(tools_mount, load, nvtop):
    """The same kernel on a compute user queue (umd's default): the process's share is
    the growth of its fdinfo drm-engine-compute, which counts the queue's run in
    progress. nvtop keeps a refresh's share only if the engine time grew by no more
    than its own clock did (extract_gpuinfo_amdgpu.c, parse_drm_fdinfo_amd), else it
    shows 0 % for the process, and for the GPU, in that refresh: an engine busy all
    the time grows by as much as the clock, and the daemon's reading and nvtop's clock
    reading are microseconds apart either way, so about one refresh in two is dropped,
    for a ring job as for a queue. So the screen is painted in full at each refresh
    (0.5 s) and the shares of all of them are looked at."""
    import sys
    screen = screen_of([sys.executable, "-m", "vgpu_tools", "run", "--mount", tools_mount, "--",
                        nvtop, "-d", "5"], 10, repaint_every=0.37)
    assert "Assertion" not in screen, screen
    util = [int(u) for u in re.findall(r"GPU \[[| ]*(\d+)% ?\]", screen)]
    assert util and max(util) > 50, screen
    shares = [int(x) for x in re.findall(rf"\b{load.pid} root \d+ Compute (\d+)%", screen)]
    assert len(shares) > 5, screen
    assert max(shares) > 50, screen


@pytest.mark.skipif(shutil.which("drm_info") is None, reason="needs drm_info (Debian drm-info)")
def test_drm_info_describes_both_nodes_at_the_new_address(tools_mount):
    r = vgpu_cli("run", "--mount", tools_mount, "--", "drm_info", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Node: /dev/dri/card0" in r.stdout and "Available nodes: primary, render" in r.stdout, r.stdout
    r = vgpu_cli("run", "--mount", tools_mount, "--", "drm_info", "-j", timeout=120)
    assert r.returncode == 0, r.stderr
    device = json.loads(r.stdout)["/dev/dri/card0"]["device"]
    assert device["available_nodes"] == 0b101 and device["bus_type"] == 0, device   # primary + render, PCI
    assert device["device_data"]["vendor"] == 0x1002 and device["device_data"]["device"] == 0x738C, device


def test_the_device_is_at_the_new_pci_address_for_libdrm(tools_mount):
    """drmdevice (libdrm's own listing) finds it at PCI_SLOT, which no host device has."""
    if shutil.which("drmdevice") is None:
        pytest.skip("drmdevice missing (Debian libdrm-tests)")
    r = vgpu_cli("run", "--mount", tools_mount, "--", "drmdevice", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    domain, bus, rest = PCI_SLOT.split(":")
    assert f"domain {int(domain, 16):04x}" in r.stdout and f"bus    {int(bus, 16):02x}" in r.stdout, r.stdout
    assert not os.path.exists(f"/sys/bus/pci/devices/{PCI_SLOT}")
