#!/usr/bin/env bash
# One-shot, idempotent set-up on a fresh Debian machine with Python 3.11:
# system packages (compiler, OpenBLAS, oneDNN, PoCL OpenCL runtime),
# a venv in .venv with a CPU-only torch pinned to 2.13.0, and torch_fl built in place.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS="build-essential libopenblas-openmp-dev libdnnl-dev pocl-opencl-icd ocl-icd-opencl-dev opencl-headers chromium"
missing=""
for p in $APT_PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq $missing >/dev/null
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# Pin torch first so nothing later can pull a multi-GB CUDA build.
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check "setuptools>=68" wheel "cffi>=1.16"
.venv/bin/pip install -q --disable-pip-version-check --no-build-isolation -e ".[test]"
# First import builds the device-guard shim for this torch into the XDG cache.
.venv/bin/python -c "import torch, torch_fl; torch.ones(1, device=\"ral:0\")" >/dev/null
