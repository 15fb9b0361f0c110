# Thin wrapper for the README's commands. Everything real is in CMake and scripts.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup build demo demo-cnn demo-sync test fuzz bench clean
all: build

setup:
	./deploy/setup.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# Local cluster (2 ps_server + 2 worker on 127.0.0.1) training the MLP on Fashion-MNIST.
demo: build
	./deploy/local_cluster.sh --build $(BUILD) --job_spec deploy/jobs/mlp.json

# The same cluster training the CNN of deploy/jobs/cnn.json (conv-pool-conv-pool-dense).
demo-cnn: build
	./deploy/local_cluster.sh --build $(BUILD) --job_spec deploy/jobs/cnn.json

# The demo MLP in sync-replica mode (deploy/jobs/mlp_sync.json: R = N = 2).
demo-sync: build
	./deploy/local_cluster.sh --build $(BUILD) --job_spec deploy/jobs/mlp_sync.json

test: setup
	cmake -S . -B $(BUILD) -DPSC_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure --no-tests=error -j $(JOBS)
	$(MAKE) fuzz

# libFuzzer targets (tests/fuzz) under ASan+UBSan, FUZZ_SECS seconds each, in build-fuzz (clang).
FUZZ_SECS ?= 30
fuzz: setup
	CC=clang cmake -S . -B build-fuzz -DPSC_FUZZ=ON -DPSC_SANITIZE=address,undefined -DPSC_CUDA=OFF \
		-DPSC_FUZZ_SECS=$(FUZZ_SECS) $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) --target fuzzers
	cd build-fuzz && ctest -L fuzz --output-on-failure --no-tests=error -j $(JOBS)

bench: build
	./tests/bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-fuzz
