"""The preload library stays in a child that a program starts with an environment of
its own (docs/libdrm.md, "What it intercepts"): IGT's amd_queue_reset posix_spawn()s
its background half with envp NULL, sudo's env_reset drops LD_PRELOAD and VGPU_MOUNT
before it runs `cat /sys/kernel/debug/dri/...` for IGT's deadlock tests."""
import os
import shutil
import subprocess

import pytest

from tests.e2e.test_preload import LIBRARY, run

pytestmark = pytest.mark.skipif(not LIBRARY.is_file(),
                                reason=f"{LIBRARY} is not built (make build compiles it)")

# Each way of starting a child with an explicit environment runs CHILD, which prints
# its two variables and reads a debugfs file only the mount has.
PROGRAM = r"""
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static const char *CHILD = "echo \"$VGPU_MOUNT|$LD_PRELOAD\"; head -c 6 /sys/kernel/debug/dri/0/name; echo";
static int reap(pid_t pid)
{
	int st;
	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}
int main(int argc, char **argv)
{
	char *args[] = {"/bin/sh", "-c", (char *)CHILD, NULL};
	char *own[] = {"PATH=/usr/bin:/bin", "LD_PRELOAD=libnothing-vgpu-test.so", NULL};
	const char *how = argv[1];
	pid_t pid;
	if (!strcmp(how, "posix_spawn")) {
		if (posix_spawn(&pid, "/bin/sh", NULL, NULL, args, NULL))
			return 98;
		return reap(pid);
	}
	if (!strcmp(how, "posix_spawnp")) {
		if (posix_spawnp(&pid, "sh", NULL, NULL, args, own))
			return 98;
		return reap(pid);
	}
	pid = fork();
	if (pid == 0) {
		if (!strcmp(how, "execve"))
			execve("/bin/sh", args, own);
		else if (!strcmp(how, "execvpe"))
			execvpe("sh", args, own);
		else if (!strcmp(how, "execle"))
			execle("/bin/sh", "sh", "-c", CHILD, (char *)NULL, (char *[]){NULL});
		_exit(97);
	}
	return reap(pid);
}
"""


@pytest.fixture(scope="module")
def spawner(tmp_path_factory):
    out = tmp_path_factory.mktemp("preload-exec")
    (out / "spawner.c").write_text(PROGRAM)
    r = subprocess.run(["gcc", "-O1", "-Wall", "-o", str(out / "spawner"), str(out / "spawner.c")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out / "spawner"


@pytest.mark.parametrize("how,kept", [("posix_spawn", ""), ("posix_spawnp", " libnothing-vgpu-test.so"),
                                      ("execve", " libnothing-vgpu-test.so"),
                                      ("execvpe", " libnothing-vgpu-test.so"), ("execle", "")])
def test_a_child_with_its_own_environment_keeps_the_library(vgpu_mount, spawner, how, kept):
    r = run(vgpu_mount, spawner, how)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    # ours first, the program's own preload after it; the mount as the parent has it
    assert lines[0] == f"{os.path.realpath(vgpu_mount)}|{LIBRARY}{kept}", r.stdout
    assert lines[1] == "amdgpu", r.stdout + r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("sudo"), reason="needs root and sudo")
def test_sudo_in_a_shell_reads_the_mounts_debugfs(vgpu_mount):
    """IGT's amd_deadlock and amd_dispatch popen("sudo cat /sys/kernel/debug/dri/...")."""
    r = run(vgpu_mount, "sh", "-c", "sudo cat /sys/kernel/debug/dri/0/name")
    assert r.returncode == 0 and r.stdout.startswith("amdgpu dev="), r.stdout + r.stderr
