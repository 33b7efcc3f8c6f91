#!/usr/bin/env bash
# One command: build the torch_fl wheel once, then for every torch version make a fresh venv,
# install that torch and the SAME wheel, and run the core test suites against the installed
# wheel (a copy of tests/ outside the source tree, so nothing imports the checkout).
#   bash scripts/torch_versions.sh [VERSION ...]      (default: 2.10.0 2.11.0 2.12.1 2.13.0 2.14.1)
# Writes one line per version to $RESULTS (default build/torch_versions.tsv) and deletes each
# venv afterwards (a CUDA build of torch with its nvidia wheels is ~6 GB).
# Needs: .venv from .ci/setup.sh (to build the wheel), python3.11, network or local wheels.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VENV=${VENV:-.venv}
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(2.10.0 2.11.0 2.12.1 2.13.0 2.14.1)
SUITES=${SUITES:-"test_device.py test_tensor_api.py test_views.py test_autograd.py test_semantics.py test_mode.py test_rng.py test_memory.py test_packaging.py"}
RESULTS=${RESULTS:-$REPO/build/torch_versions.tsv}
WORK=$(mktemp -d /tmp/torch_fl_versions.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$(dirname "$RESULTS")"
PIP="--disable-pip-version-check -q --no-compile"
quiet() { "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; }

"$VENV/bin/pip" wheel --disable-pip-version-check -q --no-build-isolation --no-deps -w "$WORK/dist" . || exit 1
WHEEL=$(ls "$WORK"/dist/torch_fl-*.whl)
# Tests without the package: conftest's REPO then has no torch_fl/, so imports hit the wheel.
mkdir -p "$WORK/src" && cp -r tests "$WORK/src/tests" && rm -rf "$WORK/src/tests/__pycache__"

for v in "${VERSIONS[@]}"; do
  echo "=== torch $v"
  env_dir="$WORK/venv-$v"
  start=$SECONDS
  python3 -m venv "$env_dir"
  # CPU builds come from the local wheel folder when present (2.13.0+cpu); PyPI's Linux wheels
  # for the other versions are CUDA builds, which also run on CPU.
  if ! quiet "$env_dir/bin/pip" install $PIP "torch==$v" > "$WORK/install-$v.log"; then
    printf '%s\t-\tnot installable\t%s\n' "$v" "$(tail -1 "$WORK/install-$v.log")" >> "$RESULTS"
    rm -rf "$env_dir"; continue
  fi
  quiet "$env_dir/bin/pip" install $PIP "$WHEEL" pytest hypothesis expecttest >> "$WORK/install-$v.log"
  got=$("$env_dir/bin/python" -c "import torch; print(torch.__version__)" 2>/dev/null)
  log="$REPO/build/torch_versions-$v.log"
  (cd "$WORK/src" && for s in $SUITES; do echo "$s"; done | sed 's|^|tests/|' | \
     xargs timeout 1500 "$env_dir/bin/python" -m pytest -q -p no:cacheprovider -x --no-header) > "$log" 2>&1
  rc=$?
  summary=$(grep -E "passed|failed|error" "$log" | tail -1)
  printf '%s\t%s\t%s\t%s\t%ss\n' "$v" "$got" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$summary" "$((SECONDS - start))" >> "$RESULTS"
  echo "torch $got: rc=$rc $summary ($((SECONDS - start)) s)"
  rm -rf "$env_dir"
done
echo "results: $RESULTS"
