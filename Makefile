# The two commands of tandem (see README.md):
#   make demo   install missing Debian packages (as root) and torch (pip, into .venv), build,
#               run the main job
#   make test   the same, then run the whole test suite,
#               then again under ASan+UBSan, the threaded tests under TSan, and the fuzzers
BUILD_DIR ?= build
JOBS ?= 2
BUILD_TYPE ?= RelWithDebInfo
WERROR ?= $(if $(CI),ON,OFF)
CMAKE_FLAGS ?=
# The virtual environment with torch==2.13.0 and the Python build and test tools
# (scripts/python-env.sh makes it from PYTHON, python3 by default).
VENV ?= $(CURDIR)/.venv

# ccache keys on paths relative to the clone: a second build folder at the same depth (the
# pip install test's build-pip/) reuses the objects of build/ when its flags are the same.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1

FUZZ_SECONDS ?= $(if $(CI),10,20)
STAGES_ENV = PYTHON=$(VENV)/bin/python BUILD_DIR=$(BUILD_DIR) JOBS=$(JOBS) BUILD_TYPE=$(BUILD_TYPE) WERROR=$(WERROR) \
  FUZZ_SECONDS=$(FUZZ_SECONDS)

.PHONY: all deps configure build demo wheel test test-asan test-python test-tsan fuzz clean

all: build

# The Debian packages and .venv, side by side (scripts/deps.sh); make demo asks only for what
# building and running the main job need (install-deps.sh --demo).
DEPS_FOR ?= all
deps:
	@VENV=$(VENV) scripts/deps.sh $(if $(filter demo,$(DEPS_FOR)),--demo)

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DTANDEM_WERROR=$(WERROR) \
	  -DPython3_EXECUTABLE=$(VENV)/bin/python $(CMAKE_FLAGS) > $(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; }

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Only what the main job needs (the packages, the launcher and the example), not the tests'.
demo: DEPS_FOR = demo
demo: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target tandemrun fashion_mnist
	$(BUILD_DIR)/bin/tandemrun --nproc-per-node 2 $(BUILD_DIR)/bin/fashion_mnist

# A self-contained wheel for the torch in .venv, or with TORCH=X.Y.Z for that torch release
# (fetched from PyPI, built in build-torchX.Y.Z): dist/tandem-<version>+torch<X.Y>-...whl
# (scripts/wheel.sh; docs/python.md#wheels). Builds only what the wheel holds.
wheel: $(if $(TORCH),deps,configure)
	@$(if $(TORCH),TORCH=$(TORCH),BUILD_DIR=$(BUILD_DIR)) PYTHON=$(VENV)/bin/python JOBS=$(JOBS) \
	  scripts/wheel.sh

# The suite, then the suite under ASan+UBSan, the threaded tests under TSan and every fuzzer
# for FUZZ_SECONDS, and the torch.distributed backend's Python tests; ends with one line
# "N passed, N failed, N skipped" (scripts/test-stages.sh).
test: build
	@FRAMEWORKS=1 VENV=$(VENV) scripts/python-env.sh >/dev/null
	@$(STAGES_ENV) scripts/test-stages.sh main python frameworks asan tsan fuzz

test-asan: deps
	@$(STAGES_ENV) scripts/test-stages.sh asan

test-python: build
	@FRAMEWORKS=1 VENV=$(VENV) scripts/python-env.sh >/dev/null
	@$(STAGES_ENV) scripts/test-stages.sh python frameworks

test-tsan: deps
	@$(STAGES_ENV) scripts/test-stages.sh tsan

fuzz: deps
	@$(STAGES_ENV) scripts/test-stages.sh fuzz

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log
	rm -rf $(BUILD_DIR)-asan $(BUILD_DIR)-tsan $(BUILD_DIR)-fuzz
	rm -f $(foreach s,asan tsan fuzz,$(BUILD_DIR)-$(s).configure.log $(BUILD_DIR)-$(s).build.log \
	  $(BUILD_DIR)-$(s).build.status)
