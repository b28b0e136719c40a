# oomscope: the quick start is `make demo` and `make test` on a fresh clone.
#   make deps      install the missing Debian packages for building and testing (idempotent; says what it installs)
#   make build     configure and build everything into $(BUILD) (tests, fuzz replays, benchmarks, examples)
#   make demo      build only what the demo runs, run the example under oomscope and render its OOM report
#   make test      unit + integration tests (no GPU needed), the wheel and the Debian package included
#   make install   PREFIX=/opt/oomscope: a relocatable install tree, binaries stripped, debug files in lib/debug
#   make wheel     dist/oomscope-VERSION-py3-none-manylinux_2_N_x86_64.whl (pip install it into any venv)
#   make package   dist/oomscope_VERSION_amd64.deb and its -dbg part (CPack; installs under /usr)
#   make gpu-test  tests/gpu/run_all.sh against an install in $(BUILD)/dist (needs a GPU)
#   make bench     the CPU benchmarks (bench/run_cpu.sh; figures in docs/BENCHMARKS.md)
#   make test-asan unit tests, fuzz corpora, the CLI on every fixture and the preload's integration tests under ASan + UBSan
#   make test-tsan unit tests and the preload's integration tests (stress, fork, signals, flight recorder) under TSan
#   make fuzz      libFuzzer on the report reader, check's options and flight files, FUZZ_SECONDS each (clang; corpora replayed in make test)

BUILD   ?= build
PREFIX  ?= /usr/local
DIST    ?= dist
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
# Debian's Python, where python3-build, python3-pytest and the rest are installed (not a
# python3 that another tool put first on PATH).
PYTHON  ?= $(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)

# What building needs (make demo installs only these) and what the tests add: pytest for the
# integration tests, chromium (the HTML views are opened in a real headless browser), tmux
# (oomscope top is run in one), the wheel's and the Debian package's tools, Prometheus and its
# node exporter (oomscope metrics is scraped by them, on loopback ports).
BUILD_PACKAGES := cmake ninja-build g++ make binutils pkg-config libunwind-dev libdw-dev nlohmann-json3-dev libspdlog-dev \
                  libfmt-dev catch2 libcli11-dev python3
TEST_PACKAGES  := python3-pytest python3-pytest-xdist python3-jsonschema time chromium tmux \
                  python3-venv python3-pip-whl python3-setuptools-whl python3-build python3-wheel python3-setuptools \
                  patchelf prometheus prometheus-node-exporter
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# The targets the demo runs: the CLI, the preload and its Python adapter, the example on the
# simulated device (and its fake CUDA, CUPTI and NVML), and the example built by nvcc where a GPU is.
DEMO_TARGETS := oomscope_cli oomscope_preload oomscope_python leaky_oom_fake fakecuda_cupti fakecuda_nvml \
                $(shell nvidia-smi -L >/dev/null 2>&1 && echo leaky_oom)

.PHONY: all deps deps-build build demo test install wheel package gpu-test bench test-asan test-tsan fuzz clean

all: build

define install_packages
	@missing=""; \
	for p in $(1); do \
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
endef

deps-build:
	$(call install_packages,$(BUILD_PACKAGES))

deps:
	$(call install_packages,$(BUILD_PACKAGES) $(TEST_PACKAGES))

$(BUILD)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_ARGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE gpu

demo: deps-build $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target $(DEMO_TARGETS)
	@tools/demo.sh $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

wheel: build
	tools/make_wheel.sh $(BUILD) $(DIST) $(PYTHON)

package: build
	cd $(BUILD) && cpack -B $(abspath $(DIST)) >/dev/null && rm -rf $(abspath $(DIST))/_CPack_Packages
	@ls $(DIST)/oomscope*.deb

gpu-test: build
	rm -rf $(BUILD)/dist && cmake --install $(BUILD) --prefix $(BUILD)/dist >/dev/null
	tests/gpu/run_all.sh $(BUILD)/dist $(BUILD)/gpu-results

bench: build
	bench/run_cpu.sh $(BUILD)

# Sanitizer builds of their own (build-asan, build-tsan), each with the unit tests and the
# preload's integration tests.
SAN_FLAGS_asan := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SAN_FLAGS_tsan := -fsanitize=thread -fno-omit-frame-pointer

# The integration tests run against ASan builds of the preload, the fake CUDA and the test
# programs, with the ASan runtime first in every LD_PRELOAD (tests/integration/conftest.py);
# the tests that cannot hold under ASan skip, saying why. Optimised: the preload's dlsym must
# stay a tail call (RTLD_NEXT is relative to its caller).
ASAN_RUNTIME = $(shell $(CXX) -print-file-name=libasan.so)
test-asan: deps
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOOMSCOPE_BUILD_CUDA_EXAMPLES=OFF \
	  "-DCMAKE_C_FLAGS=$(SAN_FLAGS_asan)" "-DCMAKE_CXX_FLAGS=$(SAN_FLAGS_asan)" \
	  "-DCMAKE_EXE_LINKER_FLAGS=$(SAN_FLAGS_asan)" "-DCMAKE_SHARED_LINKER_FLAGS=$(SAN_FLAGS_asan)" >/dev/null
	cmake --build $(BUILD)-asan -j $(JOBS)
	OOMSCOPE_TEST_PRELOAD_FIRST=$(ASAN_RUNTIME) ASAN_OPTIONS=detect_leaks=0 \
	  ctest --test-dir $(BUILD)-asan -L integration --output-on-failure
	ASAN_OPTIONS=detect_leaks=0 $(BUILD)-asan/bin/unit_tests
	ASAN_OPTIONS=detect_leaks=0 $(BUILD)-asan/bin/fuzz_replay tests/fuzz/corpus tests/fixtures/v1
	ASAN_OPTIONS=detect_leaks=0 $(BUILD)-asan/bin/fuzz_replay_check_args tests/fuzz/corpus-check-args
	ASAN_OPTIONS=detect_leaks=0 $(BUILD)-asan/bin/fuzz_replay_flight tests/fuzz/corpus-flight
	ASAN_OPTIONS=detect_leaks=0 $(BUILD)-asan/bin/fuzz_replay_metrics tests/fuzz/corpus-flight
	ASAN_OPTIONS=detect_leaks=0 $(BUILD)-asan/bin/fuzz_replay_job tests/fuzz/corpus-job tests/fixtures/v1
	ASAN_OPTIONS=detect_leaks=0 $(BUILD)-asan/bin/fuzz_replay_redact tests/fuzz/corpus-redact
	@for f in tests/fixtures/v1/*.json; do \
	  ASAN_OPTIONS=detect_leaks=0 $(BUILD)-asan/bin/oomscope report $$f >/dev/null || exit 1; done; \
	ASAN_OPTIONS=detect_leaks=0 $(BUILD)-asan/bin/oomscope check tests/fixtures/v1/*.json --max-peak 1GiB \
	  --max-fragmentation 10 >/dev/null; [ $$? -eq 1 ] && echo "make test-asan: clean"

# libFuzzer for FUZZ_SECONDS each (default 60) on the report reader, `oomscope check`'s option
# strings, the flight-recorder file reader, the job view, metrics' flight reads and the redaction; new inputs stay in $(BUILD)-fuzz/corpus-*; a
# crash leaves crash-* in the working directory: add it to the target's tests/fuzz/corpus* once
# fixed (they are replayed in make test).
FUZZ_SECONDS ?= 60
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(BUILD)-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOOMSCOPE_FUZZ=ON \
	  -DOOMSCOPE_BUILD_CUDA_EXAMPLES=OFF "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined" \
	  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" >/dev/null
	cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzz_report fuzz_check_args fuzz_flight fuzz_job fuzz_metrics fuzz_redact
	mkdir -p $(BUILD)-fuzz/corpus-report $(BUILD)-fuzz/corpus-check-args $(BUILD)-fuzz/corpus-flight \
	  $(BUILD)-fuzz/corpus-job $(BUILD)-fuzz/corpus-metrics $(BUILD)-fuzz/corpus-redact
	$(BUILD)-fuzz/bin/fuzz_report -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 $(BUILD)-fuzz/corpus-report tests/fuzz/corpus tests/fixtures/v1
	$(BUILD)-fuzz/bin/fuzz_check_args -max_total_time=$(FUZZ_SECONDS) $(BUILD)-fuzz/corpus-check-args tests/fuzz/corpus-check-args
	$(BUILD)-fuzz/bin/fuzz_flight -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 $(BUILD)-fuzz/corpus-flight tests/fuzz/corpus-flight
	$(BUILD)-fuzz/bin/fuzz_job -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 $(BUILD)-fuzz/corpus-job tests/fuzz/corpus-job tests/fixtures/v1
	$(BUILD)-fuzz/bin/fuzz_metrics -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 $(BUILD)-fuzz/corpus-metrics tests/fuzz/corpus-flight
	$(BUILD)-fuzz/bin/fuzz_redact -max_total_time=$(FUZZ_SECONDS) $(BUILD)-fuzz/corpus-redact tests/fuzz/corpus-redact

# Under TSan as under ASan: the preload, the fake CUDA and the test programs are TSan builds and
# the TSan runtime comes first in every LD_PRELOAD. A data race makes TSan end the process with
# status 66 (halt_on_error), which every test's status check catches.
TSAN_RUNTIME = $(shell $(CXX) -print-file-name=libtsan.so)
test-tsan: deps
	cmake -S . -B $(BUILD)-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOOMSCOPE_BUILD_CUDA_EXAMPLES=OFF \
	  "-DCMAKE_C_FLAGS=$(SAN_FLAGS_tsan)" "-DCMAKE_CXX_FLAGS=$(SAN_FLAGS_tsan)" \
	  "-DCMAKE_EXE_LINKER_FLAGS=$(SAN_FLAGS_tsan)" "-DCMAKE_SHARED_LINKER_FLAGS=$(SAN_FLAGS_tsan)" >/dev/null
	cmake --build $(BUILD)-tsan -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)-tsan/bin/unit_tests
	OOMSCOPE_TEST_PRELOAD_FIRST=$(TSAN_RUNTIME) TSAN_OPTIONS=halt_on_error=1 \
	  ctest --test-dir $(BUILD)-tsan -L integration --output-on-failure
	@echo "make test-tsan: clean"

clean:
	rm -rf $(BUILD)
