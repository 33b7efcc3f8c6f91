#!/usr/bin/env bash
# Build the wheel and smoke-test it in a fresh venv with no source tree on the path:
# ral:0 works through autoload, ralctl and ral-trace run, and TORCH_DEVICE_BACKEND_AUTOLOAD=0
# leaves torch alone. Usage: bash .ci/wheel_smoke.sh  (needs .venv from .ci/setup.sh)
# TORCH_SPEC picks the torch for the test venv (default: the CPU 2.13.0 wheel setup.sh pins).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO_DIR=$PWD
VENV=${VENV:-.venv}  # the build venv (setuptools, cffi)
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
WORK=$(mktemp -d /tmp/torch_fl_wheel.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
PIP="--disable-pip-version-check -q"
# pip warns about every missing folder of an extra local index: noise, not news.
export PIP_NO_WARN_SCRIPT_LOCATION=1
quiet() { "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; }

start=$SECONDS
"$VENV/bin/pip" wheel $PIP --no-build-isolation --no-deps -w "$WORK/dist" .
WHEEL=$(ls "$WORK"/dist/torch_fl-*.whl)
echo "wheel: $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1)) in $((SECONDS - start)) s"

t=$SECONDS
python3 -m venv "$WORK/venv"
# torch first and pinned, so the wheel's "torch" requirement can never pull a CUDA build.
# --no-compile: byte-compiling all of torch is most of the install time.
quiet "$WORK/venv/bin/pip" install $PIP --no-compile "$TORCH_SPEC"
quiet "$WORK/venv/bin/pip" install $PIP "$WHEEL"
echo "fresh venv with $TORCH_SPEC and the wheel in $((SECONDS - t)) s"
t=$SECONDS

cd "$WORK"  # nothing of the source tree importable from here
PY="$WORK/venv/bin/python"
"$PY" - <<'PYEOF'
import sys, torch
assert "torch_fl" in sys.modules, "import torch did not autoload torch_fl"
import torch_fl
assert "/venv/" in torch_fl.__file__, torch_fl.__file__
x = torch.randn(8, 5)
w = torch.randn(5, 3, requires_grad=True)
y = (x.to("ral:0") @ w.detach().to("ral:0").requires_grad_()).relu().sum()
y.backward()
ref = (x @ w).relu().sum()
torch.testing.assert_close(y.cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
print(f"ral:0 ok: torch {torch.__version__}, plugins {[(p.record.name, p.status) for p in torch_fl.plugins()]}")
PYEOF
TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PY" -c "import sys, torch; assert 'torch_fl' not in sys.modules"
"$WORK/venv/bin/ralctl" plugin-status
"$WORK/venv/bin/ralctl" list-devices >/dev/null
"$WORK/venv/bin/ral-trace" --help >/dev/null
# A vendor's first plugin from the wheel alone: the template (its two files copied out of the
# source tree) built against the headers the wheel ships, installed, validated, entries certified.
mkdir "$WORK/acme"
cp "$REPO_DIR"/plugins/template/{Makefile,template.c} "$WORK/acme/"
cp "$REPO_DIR/manifests/template.json" "$WORK/acme/manifest.json"
INC=$("$WORK/venv/bin/ralctl" sdk --include)
case "$INC" in "$WORK/venv/"*) ;; *) echo "ralctl sdk --include is not the wheel's: $INC"; exit 1 ;; esac
PATH="$WORK/venv/bin:$PATH" make -s -C "$WORK/acme" install PREFIX="$WORK/plugins"
"$WORK/venv/bin/ralctl" manifest validate "$WORK/plugins/template"
"$WORK/venv/bin/ralctl" certify "$WORK/plugins/template" --out "$WORK/cert" --samples 1 \
  --section abi --section entries >/dev/null || true  # a partial run never certifies: read the failures
"$PY" -c "import json, sys; f = json.load(open(sys.argv[1]))['summary']['failures']; assert not f, f" \
  "$WORK/cert/certificate.json"
echo "template plugin built out of tree from the wheel's SDK, validated, entries certified"
echo "checks in $((SECONDS - t)) s"
echo "wheel smoke test passed in $((SECONDS - start)) s"
