# Thin wrapper for the README's commands. Everything real is in CMake and scripts.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup build demo demo-cnn demo-sync demo-ctr test sanitize tsan fuzz bench clean
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

# A click-through model (deploy/jobs/ctr.json: DLRM-style with a wide part, a 10^8-row table) on
# 2 million rows of SYNTHETIC Criteo-format data from a planted model (deploy/demo_ctr.sh).
demo-ctr: build
	./deploy/demo_ctr.sh --build $(BUILD)

test: setup
	cmake -S . -B $(BUILD) -DPSC_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure --no-tests=error -j $(JOBS)
	$(MAKE) sanitize tsan

FUZZ_SECS ?= 30
SAN_CMAKE = CC=clang cmake -S . -B build-fuzz -DPSC_FUZZ=ON -DPSC_SANITIZE=address,undefined -DPSC_CUDA=OFF \
	-DPSC_FUZZ_SECS=$(FUZZ_SECS) $(CMAKE_FLAGS)

# The whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer (clang, build-fuzz),
# the libFuzzer targets included (FUZZ_SECS seconds each), but the tests labelled `faults` (the
# network-namespace fault tests and the soak: minutes of timing-based runs; the recovery code
# they drive runs under the sanitizers in test_checkpoint, test_late_ps_crash, test_start_ps_crash),
# and the label `image` (the container images build their own binaries from the sources).
sanitize: setup
	$(SAN_CMAKE)
	cmake --build build-fuzz -j $(JOBS)
	cd build-fuzz && ctest --output-on-failure --no-tests=error -j $(JOBS) -LE 'faults|image'

# The concurrency tests (store, sync accumulator, sparse table and its rows' life, metrics registry, event writer) under ThreadSanitizer.
tsan: setup
	cmake -S . -B build-tsan -DPSC_SANITIZE=thread -DPSC_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-tsan -j $(JOBS) --target test_store test_store_sync test_store_export test_sync test_sparse_table test_sparse_life test_metrics test_tfevents test_service_replicas test_service_fence
	cd build-tsan && ctest --output-on-failure --no-tests=error -j $(JOBS) -R '^unit[.]test_(store|store_sync|store_export|sync|sparse_table|sparse_life|metrics|tfevents|service_replicas|service_fence)$$'

# Only the libFuzzer targets (tests/fuzz), FUZZ_SECS seconds each, in build-fuzz.
fuzz: setup
	$(SAN_CMAKE)
	cmake --build build-fuzz -j $(JOBS) --target fuzzers
	cd build-fuzz && ctest -L fuzz --output-on-failure --no-tests=error -j $(JOBS)

bench: build
	./tests/bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-fuzz build-tsan
