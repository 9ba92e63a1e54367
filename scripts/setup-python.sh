#!/usr/bin/env bash
# Idempotent setup of the Python reference environment used by the PyTorch comparison
# (tests/python, jobs/bench/compare_python.sh): a venv outside the checkout with torch==2.11.0
# (CPU + CUDA code from the cached wheel, WITHOUT the multi-gigabyte nvidia-* wheels: the
# system CUDA 13 toolkit provides cudart/cublas/cudnn/nccl, and the three libraries it lacks are
# copied from the libtorch prefix that ./scripts/setup.sh prepared), numpy, h5py and accelerate,
# plus the Hugging Face / TensorBoard readers that the interop tests check hpctrain's files with
# (transformers, tokenizers, safetensors, tensorboard). A venv made by an older version of this
# script (stamped, base imports fine) gets only the interop packages added, not a rebuild.
# Prints the venv's python on stdout (its only stdout line) on success. Usage: scripts/setup-python.sh
set -euo pipefail

TORCH_VERSION="2.11.0"
CACHE_ROOT="${HPCTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpctrain}"
VENV="$CACHE_ROOT/venv-torch-$TORCH_VERSION"
WHEELS="$CACHE_ROOT/wheels"
LIBTORCH_LIB="$CACHE_ROOT/libtorch-$TORCH_VERSION-cu130/torch/lib"
STAMP="$VENV/.complete"
PY_DEPS=(filelock typing-extensions sympy networkx jinja2 fsspec setuptools numpy h5py
         psutil pyyaml packaging safetensors huggingface_hub)
EXTRA_LIBS=(libcusparseLt.so.0 libcufile.so.0 libnvshmem_host.so.3)
# Pinned: the interop tests compare byte-exact behaviour (tokenizer ids, event-file parsing) with these
# releases. None of them depends on torch, so the resolver pulls neither a second torch nor nvidia-*
# wheels (checked with pip install --dry-run --report; install_interop refuses if that ever changes).
INTEROP_PKGS=(transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 tensorboard==2.21.0)

die() { echo "hpctrain setup-python: $*" >&2; exit 1; }
say() { echo "hpctrain setup-python: $*" >&2; }

check_base_import() {
  "$VENV/bin/python" -c "import torch, numpy, h5py, accelerate; assert torch.__version__.startswith('$TORCH_VERSION'); \
import torch.distributed as d; assert d.is_available() and d.is_gloo_available(); print(torch.__version__, torch.randn(2,2) @ torch.randn(2,2))" \
    >"$CACHE_ROOT/setup-python-check.log" 2>&1
}

check_interop_import() {
  "$VENV/bin/python" -c "import transformers, tokenizers, safetensors.numpy, tensorboard; \
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator; \
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast; \
print('transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'tensorboard', tensorboard.__version__)" \
    >>"$CACHE_ROOT/setup-python-check.log" 2>&1
}

check_import() { check_base_import && check_interop_import; }

# Installs the interop packages; refuses when the resolver would replace torch or add nvidia-* wheels.
install_interop() {
  local log="$CACHE_ROOT/setup-python-pip.log" report="$CACHE_ROOT/setup-python-interop-plan.json"
  local pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
  "${pip[@]}" --dry-run --report "$report" "${INTEROP_PKGS[@]}" >>"$log" 2>&1 \
    || die "pip could not resolve ${INTEROP_PKGS[*]} (see $log)"
  local unwanted
  unwanted=$("$VENV/bin/python" -c "import json, sys; r = json.load(open(sys.argv[1])); \
print(' '.join(i['metadata']['name'] for i in r['install'] if i['metadata']['name'].lower() == 'torch' \
or i['metadata']['name'].lower().startswith('nvidia')))" "$report") || die "cannot read pip's plan $report"
  [ -z "$unwanted" ] || die "installing ${INTEROP_PKGS[*]} would pull $unwanted; refusing (see $report)"
  "${pip[@]}" "${INTEROP_PKGS[@]}" >>"$log" 2>&1 || die "pip install of ${INTEROP_PKGS[*]} into $VENV failed (see $log)"
}

find_python() {
  local p
  for p in python3.11 python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
      echo "$p"; return 0
    fi
  done
  return 1
}

fetch_torch_wheel() {
  local whl
  whl=$(ls "$WHEELS"/torch-"$TORCH_VERSION"-cp311-*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$whl" ]; then
    say "torch wheel not cached in $WHEELS; downloading torch==$TORCH_VERSION (no deps)"
    mkdir -p "$WHEELS"
    "$1" -m pip download -q --no-deps --python-version 3.11 --only-binary=:all: -d "$WHEELS" "torch==$TORCH_VERSION" \
      >"$CACHE_ROOT/setup-python-pip.log" 2>&1 \
      || die "could not download torch==$TORCH_VERSION into $WHEELS (see $CACHE_ROOT/setup-python-pip.log)"
    whl=$(ls "$WHEELS"/torch-"$TORCH_VERSION"-cp311-*.whl | head -n1)
  fi
  echo "$whl"
}

build_venv() {
  local py whl log="$CACHE_ROOT/setup-python-pip.log"
  py=$(find_python) || die "Python 3.11 not found (the torch $TORCH_VERSION wheel is cp311); install python3.11 and rerun"
  [ -d "$LIBTORCH_LIB" ] || die "libtorch prefix $LIBTORCH_LIB missing; run ./scripts/setup.sh first"
  whl=$(fetch_torch_wheel "$py")
  say "creating $VENV (torch $TORCH_VERSION without the nvidia-* wheels, numpy, h5py, accelerate)"
  rm -rf "$VENV"
  "$py" -m venv "$VENV" || die "python -m venv failed for $VENV"
  local pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
  {
    "${pip[@]}" --no-deps "$whl" &&
    "${pip[@]}" "${PY_DEPS[@]}" &&
    # accelerate without deps: its torch requirement would otherwise pull torch's nvidia-* wheels.
    "${pip[@]}" --no-deps accelerate
  } >"$log" 2>&1 || die "pip install into $VENV failed (see $log)"
  install_interop
  local tlib
  tlib=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch/lib
  for l in "${EXTRA_LIBS[@]}"; do
    [ -f "$LIBTORCH_LIB/$l" ] || die "$LIBTORCH_LIB/$l missing; rerun ./scripts/setup.sh"
    cp -f "$LIBTORCH_LIB/$l" "$tlib/"
  done
}

mkdir -p "$CACHE_ROOT"
if [ -f "$STAMP" ] && check_import; then
  echo "$VENV/bin/python"
  exit 0
fi
if [ -f "$STAMP" ] && check_base_import; then
  # The stamp goes first: an interrupted upgrade must not look complete to tests/python/with_venv.sh.
  say "adding ${INTEROP_PKGS[*]} to $VENV"
  rm -f "$STAMP"
  : >"$CACHE_ROOT/setup-python-pip.log"
  install_interop
else
  build_venv
fi
check_import || die "import torch or the interop packages fails in $VENV (see $CACHE_ROOT/setup-python-check.log)"
touch "$STAMP"
say "ready: torch $(head -n1 "$CACHE_ROOT/setup-python-check.log" | cut -d" " -f1) in $VENV"
echo "$VENV/bin/python"
