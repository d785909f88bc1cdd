# The two commands of tandem (see README.md):
#   make demo   install missing Debian packages (as root), build, run the main job
#   make test   install missing Debian packages (as root), build, run the whole test suite
BUILD_DIR ?= build
JOBS ?= 2
BUILD_TYPE ?= RelWithDebInfo
WERROR ?= $(if $(CI),ON,OFF)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DTANDEM_WERROR=$(WERROR) $(CMAKE_FLAGS) > $(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; }

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	$(BUILD_DIR)/bin/tandemrun --nproc-per-node 2 $(BUILD_DIR)/bin/fashion_mnist

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log
