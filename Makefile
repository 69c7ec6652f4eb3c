# vgpu: `make demo` and `make test` are the two commands a new user types; each
# installs what is missing (deps) and builds the Cython core (build) first.
PYTHON ?= python3
PIP := PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip
DEB_PKGS := libfuse3-dev fuse3 pkg-config strace libdrm-dev libdrm-tests gcc patch drm-info radeontop
PY_PKGS := trio numpy cython pytest pytest-trio setuptools wheel
# pyfuse3 has no ioctl handler: deps builds the pinned release with deps/pyfuse3/ioctl.patch
# (FUSE_IOCTL, FUSE_INTERRUPT and main(ioctl_thread=True); docs/ioctl.md), under a
# local version so that a stock pyfuse3 is noticed and replaced.
PYFUSE3_VERSION := 3.5.0
PYFUSE3_LOCAL := $(PYFUSE3_VERSION)+vgpu.ioctl.5
PYFUSE3_SRC := build/pyfuse3/pyfuse3-$(PYFUSE3_VERSION)
# Empty: the demo mounts a fresh temporary directory.
DEMO_MOUNT ?=
# The preload library `vgpu run` loads, and the C samples (docs/libdrm.md).
PRELOAD := preload/libvgpu_preload.so
C_SAMPLES := samples/c/sdma_exercise samples/c/dmabuf_share samples/c/userq_nop

.PHONY: deps pyfuse3 build test soak demo bench clean

deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; fi
	@$(PYTHON) -c "import trio, numpy, Cython, pytest, pytest_trio, wheel, setuptools" 2>/dev/null || \
	  $(PIP) install -q $(PY_PKGS)
	@$(PYTHON) -c "import importlib.metadata as m, sys; sys.exit(m.version('pyfuse3') != '$(PYFUSE3_LOCAL)')" 2>/dev/null || \
	  $(MAKE) --no-print-directory pyfuse3

# pyfuse3 $(PYFUSE3_VERSION) from PyPI's source release, patched, built and installed.
pyfuse3:
	@echo "building pyfuse3 $(PYFUSE3_VERSION) with deps/pyfuse3/ioctl.patch"
	rm -rf build/pyfuse3 && mkdir -p build/pyfuse3
	$(PIP) download -q --no-deps --no-binary :all: -d build/pyfuse3 pyfuse3==$(PYFUSE3_VERSION)
	tar xzf build/pyfuse3/pyfuse3-$(PYFUSE3_VERSION).tar.gz -C build/pyfuse3
	patch -s -d $(PYFUSE3_SRC) -p1 < deps/pyfuse3/ioctl.patch
	SETUPTOOLS_SCM_PRETEND_VERSION=$(PYFUSE3_LOCAL) $(PIP) install -q $(PYFUSE3_SRC)

# Compiles the Cython core in place, on both cores, and installs the packages in
# editable mode, so samples, `vgpu` and `python3 -m ...` work from any directory.
# First it removes any extension module that has a .py of the same name beside it
# (the CS path's modules were compiled until 2026-12-04, docs/bench.md): Python
# would import the old build instead of the source.
build: deps
	@for so in $$(find kmd vdev vgpu libvgpu -name '*.cpython-*.so'); do \
	  if [ -f "$${so%%.cpython-*}.py" ]; then echo "removing $$so: it would hide $${so%%.cpython-*}.py"; rm -f "$$so"; fi; done
	$(PYTHON) setup.py -q build_ext --inplace -j 2
	$(PIP) install -q --no-build-isolation --no-deps -e .
	@$(MAKE) --no-print-directory $(PRELOAD) $(C_SAMPLES)

# Unmodified libdrm programs on a mount: an LD_PRELOAD library, no Python in it.
$(PRELOAD): preload/vgpu_preload.c include/vgpu_drm.h
	gcc -O2 -Wall -Wextra -fPIC -shared -Iinclude $$(pkg-config --cflags libdrm) -o $@ $< -ldl -lpthread

samples/c/%: samples/c/%.c
	gcc -O2 -Wall -Iinclude -o $@ $< $$(pkg-config --cflags --libs libdrm_amdgpu libdrm)

test: build
	$(PYTHON) -m pytest -q tests

# Not part of `make test`: 1,000,000 fuzzed requests from 4 processes, fuzzed IBs on
# every ring and a checksummed victim against a fresh mount (tests/soak.py); it prints
# the requests sent, crashes, hangs, the daemon's RSS before and after, and leaks.
SOAK_REQUESTS ?= 1000000
soak: build
	$(PYTHON) -m tests.soak --requests $(SOAK_REQUESTS) --procs 4

# The Python exercise (vgpu_tools.demo mounts and unmounts), then the same exercise in
# C on libdrm_amdgpu through `vgpu run`, on a device mounted for it.
demo: build
	@$(PYTHON) -m vgpu_tools.demo $(DEMO_MOUNT); py=$$?; \
	mnt="$(DEMO_MOUNT)"; [ -n "$$mnt" ] || mnt=$$(mktemp -d /tmp/vgpu-demo-c-XXXXXX); \
	echo "== C: samples/c/sdma_exercise on libdrm_amdgpu, through vgpu run (mounted at $$mnt)"; \
	$(PYTHON) -m vgpu_tools mount $$mnt --vram 256M || exit 1; \
	$(PYTHON) -m vgpu_tools run --mount $$mnt -- samples/c/sdma_exercise; c=$$?; \
	$(PYTHON) -m vgpu_tools umount $$mnt; \
	[ -n "$(DEMO_MOUNT)" ] || $(PYTHON) -c "import sys; from vgpu_tools.demo import forget_mount; forget_mount(sys.argv[1])" $$mnt; \
	echo "== demo: Python $$( [ $$py = 0 ] && echo PASS || echo FAIL), C $$( [ $$c = 0 ] && echo PASS || echo FAIL)"; \
	[ $$py = 0 ] && [ $$c = 0 ]

bench: build bench/c_echo/echo_fuse
	$(PYTHON) -m bench

# The C floor of (a): a minimal libfuse3 echo daemon, frame and ioctl (docs/bench.md).
bench/c_echo/echo_fuse: bench/c_echo/echo_fuse.c
	gcc -O2 -Wall -o $@ $< $$(pkg-config --cflags --libs fuse3)

clean:
	rm -rf build *.egg-info kmd/hw/_core.cpp kmd/hw/_core*.so kmd/hw/_aperture.c kmd/hw/_aperture*.so kmd/hw/_sdma_defs.pxi kmd/hw/_cu_defs.pxi bench/c_echo/echo_fuse $(PRELOAD) $(C_SAMPLES)
	find . -name __pycache__ -prune -exec rm -rf {} +
