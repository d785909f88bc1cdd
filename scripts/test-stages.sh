#!/usr/bin/env bash
# The stages of `make test` after the main build: its test suite, the suite under ASan+UBSan,
# the threaded tests under TSan, and every fuzzer for a bounded time. Each stage prints its
# own result and times; the tests that failed are named again at the end, with the first lines
# of their failures, and the skipped ones with their stage; the last line counts every test
# and fuzzer of the stages run: "N passed, N failed, N skipped" (a skipped test is not a pass).
# Exits non-zero when anything failed (a build failure counts as one).
#
#   scripts/test-stages.sh [main] [python] [frameworks] [asan] [tsan] [fuzz]   (default: all six)
#
# python: the torch.distributed backend's tests (tests/python, pytest) against the main build;
# frameworks: tests/python/frameworks, the training frameworks on the backend.
#
# Environment: BUILD_DIR (build), JOBS (2), BUILD_TYPE, WERROR, FUZZ_SECONDS (20 per fuzzer),
# BESIDE (1; 0: no stage's tests or builds run beside the python stage's, below).
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
WERROR=${WERROR:-OFF}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
# Sanitizer builds: -O1 and line tables only keep them (and CI) fast; the reports still
# carry file:line stacks. The ASan stage keeps assertions on (no -DNDEBUG): it is the stage
# that runs the debug-only checks (the request queues' consistency checks in transport and
# the tests that they catch misuse), which the optimised main build compiles out.
ASAN_OPT=${ASAN_OPT:-"-O1 -g1"}
SAN_OPT=${SAN_OPT:-"-O1 -g1 -DNDEBUG"}
# ASan+UBSan runs the unit tests of every layer but the algorithm sweeps (their fake
# transport replays every case; slow under ASan and no different in memory use from mp/),
# the multi-process collectives and DDP. The launcher and tool tests run in the main stage.
ASAN_DIRS=${ASAN_DIRS:-"unit/core;unit/store;unit/transport;unit/data;unit/comm;mp;ddp"}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(main python frameworks asan tsan fuzz)

passed=0
failed=0
skipped=0
skips=()     # "stage: test" for each test that was skipped
summary=()
failures=()  # "stage: test (Failed|Timeout|...)" for each test that failed, repeated at the end
excerpts=()  # per stage with failures: its first gtest failures and sanitizer reports

now() { date +%s; }

# The message a skipped gtest gave (the line after "file:line: Skipped"), from the log ctest
# keeps of every test's output in build folder $1; empty when it gave none.
skip_reason() {  # dir, test name
  awk -v name="$2" '
    /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); here = ($0 == name); next }
    here && /: Skipped$/ { getline; print; exit }' "$1/Testing/Temporary/LastTest.log" 2>/dev/null
}

# Adds the counts of a ctest run (its log in $1, its build folder $3) to the totals; a run
# without a summary line (ctest itself failed) counts as one failure.
count_ctest() {
  local log=$1 stage=$2 dir=$3 line
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -1)
  if [ -z "$line" ]; then
    failed=$((failed + 1))
    failures+=("$stage: ctest gave no summary (its output is above)")
    echo "$stage: ctest gave no summary" >&2
    return
  fi
  local f t
  f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  t=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
  # ctest's "out of N" counts the skipped tests among those that did not fail (it lists them
  # again under "did not run", with the disabled ones): they are taken out of the passed
  # ones here and counted apart.
  local k=0 name why
  while IFS= read -r name; do
    why=$(skip_reason "$dir" "$name")
    skips+=("$stage: $name${why:+ ($why)}")
    k=$((k + 1))
  done < <(sed -nE '/The following tests did not run:/,/^$/ s/^[[:space:]]+[0-9]+ - (.+) \(Skipped\)$/\1/p' "$log")
  passed=$((passed + t - f - k))
  skipped=$((skipped + k))
  failed=$((failed + f))
  # ctest lists them after "The following tests FAILED:" as "<tab>  12 - Suite.Name (Failed)".
  while IFS= read -r name; do
    failures+=("$stage: $name")
  done < <(sed -nE '/The following tests FAILED:/,$ s/^[[:space:]]+[0-9]+ - (.+)$/\1/p' "$log")
  [ "$f" -eq 0 ] || excerpts+=("$(grep -E -m3 -A4 \
    ': Failure$|runtime error|WARNING: ThreadSanitizer|ERROR: AddressSanitizer' "$log" |
    grep -vE '^$|tests passed, |^ *[0-9]+/[0-9]+ Test +#|^ *Start +[0-9]+:' | head -15)")
}

configure() {  # dir, then cmake options
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DTANDEM_WERROR="$WERROR" "$@" \
    >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
}

# Runs ctest in a build folder, adds up its results, and leaves its seconds in run_s.
run_s=0
run_ctest() {  # stage, dir, then ctest options
  local stage=$1 dir=$2
  shift 2
  local log="$dir/ctest-$stage.log" t0
  t0=$(now)
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$JOBS" "$@" 2>&1 | tee "$log"
  count_ctest "$log" "$stage" "$dir"
  run_s=$(($(now) - t0))
}

# The tests that mostly wait (tests/waiting: a cut link's timeouts) run one at a time beside
# the others, which keep the -j slots; their output follows.
stage_main() {
  local lane="$BUILD_DIR/tests/waiting" t0 pid=
  t0=$(now)
  if [ -f "$lane/CTestTestfile.cmake" ]; then
    ctest --test-dir "$lane" --output-on-failure --no-tests=error >"$lane/ctest-main.log" 2>&1 &
    pid=$!
  fi
  run_ctest main "$BUILD_DIR" -LE '^waiting$'
  if [ -n "$pid" ]; then
    wait "$pid"
    cat "$lane/ctest-main.log"
    count_ctest "$lane/ctest-main.log" main "$lane"
  fi
  summary+=("main: tests $(($(now) - t0)) s")
}

# The gtest binaries of ASAN_DIRS (unit/core -> test_unit_core): only what the stage runs.
asan_targets() {
  local d
  for d in ${ASAN_DIRS//;/ }; do printf 'test_%s ' "${d//\//_}"; done
}

# The sanitizer and fuzz builds: each stage builds its own (build_<stage>) before its tests,
# or, when the python stage runs first, they are built one after the other beside it at the
# lowest CPU priority (nice 19), in the time its tests and the frameworks' leave idle, and
# the stage waits for them. Their output is then in <build>-<stage>.build.log, printed when a
# build fails.
beside_pid=
beside=()
start_builds_beside() {
  [ "${BESIDE:-1}" = 1 ] || return 0
  local s after=
  for s in "${stages[@]}"; do  # the stages after this one
    case "$s" in
      python) after=1 ;;
      asan | tsan | fuzz) [ -n "$after" ] && beside+=("$s") && rm -f "$BUILD_DIR-$s.build.status" ;;
    esac
  done
  [ ${#beside[@]} -eq 0 ] && return
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    for s in "${beside[@]}"; do
      t0=$(now)
      if "build_$s" >"$BUILD_DIR-$s.build.log" 2>&1; then r=0; else r=1; fi
      echo "$r $(($(now) - t0))" >"$BUILD_DIR-$s.build.status"
    done
  ) &
  beside_pid=$!
}

# Builds stage $1 (or waits for its build beside the python stage) and leaves "N s" or
# "N s beside the python stage" in build_note; false, counted as a failure, when it failed.
build_note=
built() {
  local s=$1 t0 r secs
  t0=$(now)
  if [[ " ${beside[*]} " == *" $s "* ]]; then
    if [ -n "$beside_pid" ]; then
      wait "$beside_pid"
      beside_pid=
    fi
    read -r r secs <"$BUILD_DIR-$s.build.status" || r=1
    build_note="${secs:-?} s beside the python stage (waited $(($(now) - t0)) s)"
    [ "$r" = 0 ] || tail -40 "$BUILD_DIR-$s.build.log"
  else
    "build_$s" && r=0 || r=1
    build_note="$(($(now) - t0)) s"
  fi
  [ "$r" = 0 ] && return 0
  failed=$((failed + 1))
  failures+=("$s: the build failed (its output is above)")
  summary+=("$s: BUILD FAILED")
  return 1
}

# The torch.distributed backend (tests/python) with .venv's python, torch and pytest, against the
# main build's package; skipped visibly when that python cannot import torch or pytest.
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
# True when PYTHON can run stage $1's tests; otherwise counts the stage as skipped.
pytest_can_run() {
  "$PYTHON" -c "import torch.distributed, pytest" 2>/dev/null && return 0
  skipped=$((skipped + 1))
  skips+=("$1: the whole stage ($PYTHON cannot import torch and pytest)")
  summary+=("$1: skipped")
  return 1
}

pytest_command() {  # paths and options
  TANDEM_BUILD_DIR="$PWD/$BUILD_DIR" "$PYTHON" -m pytest -q -rs -p no:cacheprovider "$@"
}

# Adds up the results of stage $1's pytest run from its log.
count_pytest() {
  local stage=$1 log="$BUILD_DIR/pytest-$1.log" line
  # pytest's last line: "3 failed, 1100 passed, 2 skipped, 1 error in 30.1s".
  line=$(tail -1 "$log")
  n() { grep -Eo "[0-9]+ $1" <<<"$line" | grep -Eo '^[0-9]+' || echo 0; }
  if ! grep -Eq '[0-9]+ (passed|failed|skipped|errors?)' <<<"$line"; then
    failed=$((failed + 1))
    failures+=("$stage: pytest gave no summary (its output is above)")
    return
  fi
  passed=$((passed + $(n passed)))
  failed=$((failed + $(n failed) + $(n 'errors?')))
  skipped=$((skipped + $(n skipped)))
  while IFS= read -r name; do failures+=("$stage: $name"); done < <(
    sed -nE 's/^(FAILED|ERROR) ([^ ]+).*/\2/p' "$log")
  while IFS= read -r name; do skips+=("$stage: $name"); done < <(
    sed -nE 's/^SKIPPED \[[0-9]+\] (.*)/\1/p' "$log")
}

# Runs pytest for stage $1 on the paths and options after it and adds up its results.
run_pytest() {
  local stage=$1 t0
  shift
  t0=$(now)
  pytest_can_run "$stage" || return
  pytest_command "$@" 2>&1 | tee "$BUILD_DIR/pytest-$stage.log"
  count_pytest "$stage"
  summary+=("$stage: tests $(($(now) - t0)) s")
}

# The frameworks' tests wait much of their time (Ray's cluster, the frameworks' launchers:
# about one core of two over their run), and so do the python stage's (about half a core):
# when both stages are asked for, the frameworks' run beside the python stage's, and their
# output follows it.
frameworks_pid=
frameworks_t0=
stage_python() {
  start_builds_beside
  if [ "${BESIDE:-1}" = 1 ] && [[ " ${stages[*]} " == *" frameworks "* ]]; then
    frameworks_t0=$(now)
    if pytest_can_run frameworks; then
      pytest_command tests/python/frameworks >"$BUILD_DIR/pytest-frameworks.log" 2>&1 &
      frameworks_pid=$!
    fi
  fi
  run_pytest python tests/python --ignore=tests/python/frameworks
}

# The training frameworks of scripts/framework-requirements.txt (Lightning, torchft, Ray Train,
# DeepSpeed) running their own code on backend 'tandem', each against the same run on Gloo.
stage_frameworks() {
  if [ -z "$frameworks_t0" ]; then
    run_pytest frameworks tests/python/frameworks
    return
  fi
  [ -z "$frameworks_pid" ] && return  # pytest_can_run counted it as skipped
  wait "$frameworks_pid"
  cat "$BUILD_DIR/pytest-frameworks.log"
  count_pytest frameworks
  summary+=("frameworks: tests $(($(now) - frameworks_t0)) s, beside the python stage")
}

# The library and the ASAN_DIRS tests under AddressSanitizer + UndefinedBehaviorSanitizer.
# Without LibTorch (a prebuilt, uninstrumented library, and the largest part of the build),
# benchmarks, the install test (its consumer is not instrumented) and the style check.
build_asan() {
  # -Werror off: gcc's ASan instrumentation makes it warn falsely inside libstdc++
  # (-Wmaybe-uninitialized in <regex>, -Wstringop-overflow in vector::resize).
  configure "$BUILD_DIR-asan" -DTANDEM_SANITIZE=address,undefined -DTANDEM_WITH_TORCH=OFF \
    -DTANDEM_BUILD_BENCH=OFF -DTANDEM_WERROR=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$ASAN_OPT" \
    "-DTANDEM_TEST_DIRS=$ASAN_DIRS" &&
    cmake --build "$BUILD_DIR-asan" -j "$JOBS" --target $(asan_targets)
}

stage_asan() {
  local dir="$BUILD_DIR-asan"
  built asan || return
  # The mp sweeps run lean here (tests/mp/sweep.hpp: a dtype of each width, messages and
  # chunks an eighth of the size); the main stage checks every value.
  TANDEM_TEST_SWEEP=lean \
    ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_ctest asan "$dir" -LE '^(style|install)$'
  summary+=("asan: build $build_note, tests ${run_s} s")
}

# The communicator, DDP and store tests (the threaded ones) under ThreadSanitizer.
build_tsan() {
  configure "$BUILD_DIR-tsan" -DTANDEM_SANITIZE=thread -DTANDEM_WITH_TORCH=OFF \
    -DTANDEM_BUILD_BENCH=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$SAN_OPT" \
    "-DTANDEM_TEST_DIRS=mp;ddp;unit/store" &&
    cmake --build "$BUILD_DIR-tsan" -j "$JOBS" --target test_mp test_ddp test_unit_store
}

stage_tsan() {
  local dir="$BUILD_DIR-tsan"
  built tsan || return
  # The hierarchical and registered-buffer sweeps check values, not threads (their threading
  # is the communicator's, which the other mp tests cover): they run in the main stage only.
  # So do the collective sweep's larger worlds (4 and 5 ranks; 9 with connections made on
  # demand, whose threads are those of 6) and UCX worlds but 2 ranks over UCX's shared
  # memory: the threads they start are those of 2 and 3 ranks. The sweeps that run here run
  # lean, as under ASan.
  # UCX's memory-event hooks patch mmap/munmap, which ThreadSanitizer intercepts too (every UCX
  # test crashed at exit with both): off here, UCX works without them.
  TANDEM_TEST_SWEEP=lean UCX_MEM_EVENTS=no TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    run_ctest tsan "$dir" -LE '^(style|install)$' \
    -E '^(Layouts/Hierarchical\.AllreduceMatchesReference|Worlds/RegisteredSweep\.|.*Collectives\.MatchReferenceOnEveryRank/(shm[45]|tcp[459]|ucx[345]|ucx_tcp[2345]))'
  summary+=("tsan: build $build_note, tests ${run_s} s")
}

# Every libFuzzer target (fuzz/) for FUZZ_SECONDS from its seed corpus; a crash, leak,
# UB or timeout fails it and leaves the input in $dir/artifacts.
build_fuzz() {
  local clang
  clang=$(command -v clang++ || command -v clang++-14 || true)
  [ -n "$clang" ] || { echo "fuzz: no clang++ (the fuzzers need clang and libclang-rt-14-dev)"; return 1; }
  configure "$BUILD_DIR-fuzz" -DCMAKE_CXX_COMPILER="$clang" -DTANDEM_FUZZ=ON \
    -DTANDEM_SANITIZE=address,undefined -DTANDEM_WITH_TORCH=OFF -DTANDEM_BUILD_TESTS=OFF \
    -DTANDEM_BUILD_BENCH=OFF && cmake --build "$BUILD_DIR-fuzz" -j "$JOBS" --target fuzzers
}

stage_fuzz() {
  local dir="$BUILD_DIR-fuzz" t1
  built fuzz || return
  t1=$(now)
  mkdir -p "$dir/artifacts"
  # JOBS fuzzers at a time (each is one process), then their results in name order.
  local f name corpus execs i p names=() pids=() status=()
  for f in fuzz/fuzz_*.cpp; do names+=("$(basename "$f" .cpp)"); done
  for ((i = 0; i < ${#names[@]}; i += JOBS)); do
    pids=()
    for name in "${names[@]:i:JOBS}"; do
      corpus="$dir/corpus/$name"  # new inputs go here, the checked-in seeds stay as they are
      mkdir -p "$corpus"
      "$dir/bin/$name" -max_total_time="$FUZZ_SECONDS" -timeout=20 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$dir/artifacts/$name-" "$corpus" \
        "fuzz/corpus/$name" >"$dir/$name.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do
      wait "$p"
      status+=($?)
    done
  done
  for i in "${!names[@]}"; do
    name=${names[$i]}
    if [ "${status[$i]}" -eq 0 ]; then
      passed=$((passed + 1))
      execs=$(grep -Eo "number_of_executed_units: [0-9]+" "$dir/$name.log" | grep -Eo "[0-9]+")
      echo "fuzz $name: passed, ${execs:-?} inputs in $FUZZ_SECONDS s"
    else
      failed=$((failed + 1))
      failures+=("fuzz: $name")
      echo "fuzz $name: FAILED (log: $dir/$name.log, input in $dir/artifacts/)"
      grep -E -A30 "^==[0-9]+==ERROR|runtime error|deadly signal" "$dir/$name.log" | head -60
    fi
  done
  summary+=("fuzz: build $build_note, runs $(($(now) - t1)) s")
}

for s in "${stages[@]}"; do
  case "$s" in
    main | python | frameworks | asan | tsan | fuzz) echo "=== tandem test stage: $s" ;;
    *)
      echo "unknown stage $s (main, python, frameworks, asan, tsan, fuzz)" >&2
      exit 2
      ;;
  esac
  t0=$(now)
  "stage_$s"
  echo "=== stage $s took $(($(now) - t0)) s"
done
for line in "${summary[@]}"; do echo "  $line"; done
# The failed tests again, so that the end of a long log names them (their output is above).
if [ ${#failures[@]} -gt 0 ]; then
  echo "failed:"
  for line in "${failures[@]}"; do echo "  $line"; done
  for line in "${excerpts[@]}"; do [ -z "$line" ] || echo "$line"; done
fi
if [ ${#skips[@]} -gt 0 ]; then
  echo "skipped:"
  for line in "${skips[@]}"; do echo "  $line"; done
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
