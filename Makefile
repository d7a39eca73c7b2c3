# The two front-door commands (README):
#   make train   set up, build, train gpt-tiny on the shipped corpus (CPU)
#   make test    set up, build, run every test (lit + GoogleTest via ctest)
# ARGS is passed to stretto-train: `make train ARGS="train.steps=30"`.
BUILD ?= build
JOBS ?= 2
ARGS ?=

.PHONY: setup build test train clean
setup:
	./scripts/setup.sh $(BUILD)

build: setup
	cmake -G Ninja -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j$(JOBS)

# After the tests, every skipped test with its reason; under CI
# (STRETTO_CI=1) a skip that test/ci-may-skip.txt does not allow fails.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) --output-junit ctest-results.xml; rc=$$?; \
	  python3 scripts/test-report.py $(BUILD) || rc=1; exit $$rc

# Each run gets its own folder: a new run never overwrites an earlier one.
train: build
	./$(BUILD)/bin/stretto-train examples/gpt-tiny.toml --out runs/gpt-tiny-$$(date +%Y%m%d-%H%M%S) $(ARGS)

clean:
	rm -rf $(BUILD)
