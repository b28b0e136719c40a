# oomscope: the two commands of the quick start are `make demo` and `make test`.
#   make deps      install missing Debian packages (idempotent; says what it installs)
#   make build     configure and build into $(BUILD)
#   make test      unit + integration tests (no GPU needed)
#   make demo      run the example under oomscope and render its OOM report
#   make install   PREFIX=/opt/oomscope: a relocatable install tree
#   make gpu-test  tests/gpu/run_all.sh against an install in $(BUILD)/dist (needs a GPU)
#   make bench     the CPU benchmarks (bench/run_cpu.sh; figures in docs/BENCHMARKS.md)

BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=

DEBIAN_PACKAGES := cmake ninja-build g++ make binutils pkg-config \
                   libunwind-dev nlohmann-json3-dev libspdlog-dev libfmt-dev catch2 libcli11-dev \
                   python3 python3-pytest python3-jsonschema time

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build test demo install gpu-test bench clean

all: build

deps:
	@missing=""; \
	for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	else \
	  echo "make deps: all Debian packages present"; \
	fi
	@if [ ! -e /usr/local/cuda/include/cuda.h ] && ! command -v nvcc >/dev/null && [ -z "$${CUDAToolkit_ROOT:-}" ]; then \
	  echo "make deps: the CUDA Toolkit (headers) is needed; install it or set CUDAToolkit_ROOT" >&2; exit 1; \
	fi

$(BUILD)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_ARGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE gpu

demo: build
	@tools/demo.sh $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

gpu-test: build
	rm -rf $(BUILD)/dist && cmake --install $(BUILD) --prefix $(BUILD)/dist >/dev/null
	tests/gpu/run_all.sh $(BUILD)/dist $(BUILD)/gpu-results

bench: build
	bench/run_cpu.sh $(BUILD)

clean:
	rm -rf $(BUILD)
