#!/usr/bin/env bash
# Sanitizer job: build the native runtime and the plugins with AddressSanitizer +
# UndefinedBehaviorSanitizer, and separately with ThreadSanitizer, into a scratch copy of
# the tree (the normal in-place build is never touched), run the tests below under them
# and fail on any sanitizer report. What it covers and why: docs/reliability.md.
#
#   .ci/sanitizers.sh            # both builds (about 5 minutes on 2 cores)
#   .ci/sanitizers.sh asan       # ASan+UBSan only
#   .ci/sanitizers.sh tsan       # TSan only
#
# Environment: PYTHON (default .venv/bin/python), SANITIZER_DIR (scratch directory, kept
# for inspection when set; a fresh temporary one is removed otherwise),
# TORCH_FL_STRESS_SECONDS (length of the concurrency stress test, default 8).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
WHICH=${1:-all}
STRESS=${TORCH_FL_STRESS_SECONDS:-8}
if [ -n "${SANITIZER_DIR:-}" ]; then
  WORK=$SANITIZER_DIR
  mkdir -p "$WORK"
else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/torch_fl_sanitizers.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
fi
JOBS=$(nproc 2>/dev/null || echo 2)
FAILED=0

say() { printf '\n== %s (%ss)\n' "$*" "$SECONDS"; }

# A copy of the sources (tracked and new files, no build outputs) under $WORK/<name>.
copy_tree() {
  local dst=$WORK/$1
  rm -rf "$dst"
  mkdir -p "$dst"
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | grep -zv '^\.ci/' |
    xargs -0 tar cf - 2>/dev/null) | tar xf - -C "$dst"
}

# Build runtime + host + opencl plugins in $WORK/<name> with the given flags.
build() {
  local name=$1 flags=$2 dst=$WORK/$1
  copy_tree "$name"
  (
    cd "$dst"
    export CFLAGS="-O1 -g -fno-omit-frame-pointer $flags" LDFLAGS="$flags"
    "$PY" -c "import sys; sys.path.insert(0, 'torch_fl/_native'); import build_runtime; build_runtime.build('.')" >/dev/null
    mkdir -p torch_fl/_plugins
    cp manifests/schema.json torch_fl/_plugins/schema.json
    for p in host opencl; do
      [ -f "plugins/$p/Makefile" ] || continue
      if [ "$p" = opencl ] && [ ! -f /usr/include/CL/cl.h ]; then continue; fi
      mkdir -p "torch_fl/_plugins/$p"
      make -s -j"$JOBS" -C "plugins/$p" OUT="$dst/torch_fl/_plugins/$p" >/dev/null
      cp "manifests/$p.json" "torch_fl/_plugins/$p/manifest.json"
    done
  )
}

# Fail (but keep going) when a sanitizer wrote a report into $1. ASan's "failed to
# allocate" warnings are expected (the out-of-memory tests) and are not reports.
REPORT='ERROR: AddressSanitizer|runtime error:|WARNING: ThreadSanitizer|ERROR: ThreadSanitizer|ERROR: LeakSanitizer'
check_logs() {
  local logs=$1 what=$2 bad=0
  for f in "$logs"/*; do
    [ -f "$f" ] || continue
    if grep -Eq "$REPORT" "$f"; then
      echo "---- $f" >&2
      head -80 "$f" >&2
      bad=1
    fi
  done
  if [ $bad = 1 ]; then
    echo "!! $what: sanitizer reports above" >&2
    FAILED=1
  else
    echo "   $what: no sanitizer reports"
  fi
}

# Run pytest in the sanitized copy $1 with sanitizer environment in "${ENVV[@]}".
run_tests() {
  local name=$1
  shift
  (cd "$WORK/$name" && env "${ENVV[@]}" TORCH_FL_STRESS_SECONDS="$STRESS" \
    PYTHONPATH="$WORK/$name" "$PY" -m pytest -q -p no:cacheprovider -x "$@") || FAILED=1
}

# The model test and OpInfo entries run under ASan: one small transformer, and ops that
# cover each kernel family (element-wise, reduction, BLAS, index, layout, nn).
SAMPLE="(gpt2 and test_model_to_device) or (device- and float32 and (-add- or -mul- or -sum- \
or -matmul- or -gather- or -scatter_add- or -index_select- or -softmax- or -cat- or -cov- \
or -nn.functional.embedding-))"

if [ "$WHICH" = all ] || [ "$WHICH" = asan ]; then
  say "build with -fsanitize=address,undefined"
  build asan "-fsanitize=address,undefined -fno-sanitize=vptr"
  LOGS=$WORK/asan-logs
  rm -rf "$LOGS" && mkdir -p "$LOGS"
  # Python and torch are not instrumented: the ASan runtime must come first, and
  # libstdc++ with it so ASan sees C++ allocations made before our libraries load.
  PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
  ENVV=(
    LD_PRELOAD="$PRELOAD"
    # Leaks: CPython and torch keep allocations alive until exit by design.
    # allocator_may_return_null: the out-of-memory tests ask for absurd sizes on purpose.
    ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:log_path=$LOGS/asan:detect_odr_violation=0"
    UBSAN_OPTIONS="print_stacktrace=1:log_path=$LOGS/ubsan"
    OMP_NUM_THREADS=2
  )
  say "ASan+UBSan: runtime, plugin, index-bounds, concurrency, model and OpInfo-sample tests"
  run_tests asan tests/test_native_runtime.py tests/test_streams.py tests/test_memory.py \
    tests/test_plugin_loading.py tests/test_index_bounds.py tests/test_reliability_fixes.py \
    tests/test_concurrency.py
  # The chaos plugin's garbage answers, hangs and untrusted files: each case must end as an
  # error or a FAILED plugin with no sanitizer report (a bigger fuzz sample than plain CI).
  say "ASan+UBSan: chaos plugin, hang timeouts, trust checks"
  ENVV_CHAOS=("${ENVV[@]}")
  ENVV+=(TORCH_FL_CHAOS_EXAMPLES=${TORCH_FL_CHAOS_EXAMPLES:-25})
  run_tests asan tests/test_chaos_plugin.py tests/test_hang_timeout.py tests/test_trust_ownership.py
  ENVV=("${ENVV_CHAOS[@]}")
  for dev in ral:0 ral:1; do
    say "ASan+UBSan: a small model and an OpInfo sample on $dev"
    ENVV_DEV=("${ENVV[@]}")
    ENVV+=(TORCH_FL_TEST_DEVICE=$dev)
    run_tests asan tests/test_models.py tests/test_opinfo.py -k "$SAMPLE"
    ENVV=("${ENVV_DEV[@]}")
  done
  check_logs "$LOGS" "ASan+UBSan"
fi

if [ "$WHICH" = all ] || [ "$WHICH" = tsan ]; then
  say "build with -fsanitize=thread"
  build tsan "-fsanitize=thread"
  LOGS=$WORK/tsan-logs
  rm -rf "$LOGS" && mkdir -p "$LOGS"
  ENVV=(
    LD_PRELOAD="$(gcc -print-file-name=libtsan.so)"
    TSAN_OPTIONS="log_path=$LOGS/tsan:suppressions=$ROOT/.ci/tsan.supp:report_signal_unsafe=0:history_size=2"
    # One OpenMP thread: libgomp is not instrumented, so its hand-offs look like races.
    OMP_NUM_THREADS=1
  )
  say "TSan: concurrency stress test, hang timeouts (the watchdog's waiter threads)"
  run_tests tsan tests/test_concurrency.py
  # (not the fork case: TSan does not support starting threads after a multi-threaded fork)
  run_tests tsan tests/test_hang_timeout.py -k "not torch and not fork"
  check_logs "$LOGS" "TSan"
fi

say "done"
exit $FAILED
