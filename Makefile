# vgpu: `make demo` and `make test` are the two commands a new user types; each
# installs what is missing (deps) and builds the Cython core (build) first.
PYTHON ?= python3
PIP := PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip
DEB_PKGS := libfuse3-dev fuse3 pkg-config strace libdrm-dev gcc
PY_PKGS := pyfuse3 trio numpy cython pytest pytest-trio setuptools wheel
# Empty: the demo mounts a fresh temporary directory.
DEMO_MOUNT ?=

.PHONY: deps build test demo bench clean

deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; fi
	@$(PYTHON) -c "import pyfuse3, trio, numpy, Cython, pytest, pytest_trio, wheel, setuptools" 2>/dev/null || \
	  $(PIP) install -q $(PY_PKGS)

# Compiles the Cython core in place and installs the packages in editable mode,
# so samples, `vgpu` and `python3 -m ...` work from any directory.
build: deps
	$(PYTHON) setup.py -q build_ext --inplace
	$(PIP) install -q --no-build-isolation --no-deps -e .

test: build
	$(PYTHON) -m pytest -q tests

demo: build
	$(PYTHON) -m vgpu_tools.demo $(DEMO_MOUNT)

bench: build bench/c_echo/echo_fuse
	$(PYTHON) -m bench

# The C floor of (a): a minimal libfuse3 echo daemon (docs/bench.md).
bench/c_echo/echo_fuse: bench/c_echo/echo_fuse.c
	gcc -O2 -Wall -o $@ $< $$(pkg-config --cflags --libs fuse3)

clean:
	rm -rf build *.egg-info kmd/hw/_core.cpp kmd/hw/_core*.so kmd/hw/_aperture.c kmd/hw/_aperture*.so bench/c_echo/echo_fuse
	find . -name __pycache__ -prune -exec rm -rf {} +
