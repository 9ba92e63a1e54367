#!/usr/bin/env bash
# One-time, idempotent setup: Debian packages + libtorch (from the pinned torch wheel)
# into a versioned prefix outside the checkout, so fresh clones reuse it.
# Prints the libtorch prefix's cmake dir on the last line of success when called with --print-prefix.
set -euo pipefail

TORCH_VERSION="2.11.0"
TORCH_FLAVOUR="cu130"
CACHE_ROOT="${HPCTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpctrain}"
PREFIX="$CACHE_ROOT/libtorch-$TORCH_VERSION-$TORCH_FLAVOUR"
WHEELS="$CACHE_ROOT/wheels"
STAMP="$PREFIX/.complete"

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  fortunes fortunes-de fortunes-it fortunes-es fortunes-pl fortunes-cs
  gnuplot-nox unzip
  slurm-wlm munge
  clang-14 libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer and clang's sanitizer runtimes
)

die() { echo "hpctrain setup: $*" >&2; exit 1; }
say() { echo "hpctrain setup: $*" >&2; }

need_root() { if [ "$(id -u)" -ne 0 ]; then echo sudo; fi; }

install_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "apt-get not found; install these packages with your system's package manager: ${missing[*]}"
  local SUDO; SUDO=$(need_root)
  say "installing Debian packages: ${missing[*]}"
  if ! $SUDO apt-get update -qq >/tmp/hpctrain-apt.log 2>&1; then
    die "apt-get update failed (package source unreachable?); see /tmp/hpctrain-apt.log"
  fi
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >>/tmp/hpctrain-apt.log 2>&1; then
    die "apt-get install failed for: ${missing[*]}; see /tmp/hpctrain-apt.log"
  fi
}

install_libtorch() {
  [ -f "$STAMP" ] && return 0
  command -v python3 >/dev/null || die "python3 not found; it is needed to download the torch wheel"
  mkdir -p "$WHEELS"
  say "downloading torch==$TORCH_VERSION wheel and the CUDA libraries it needs beyond the system CUDA toolkit"
  if ! python3 -m pip download -q --no-deps -d "$WHEELS" "torch==$TORCH_VERSION" \
        nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 nvidia-cufile==1.15.1.6 \
        >/tmp/hpctrain-pip.log 2>&1; then
    die "could not download torch==$TORCH_VERSION from PyPI (see /tmp/hpctrain-pip.log); or pass your own libtorch with -DTorch_DIR=..."
  fi
  local tmp="$PREFIX.partial"
  rm -rf "$tmp"; mkdir -p "$tmp"
  unzip -q -o "$WHEELS"/torch-"$TORCH_VERSION"-*.whl 'torch/lib/*' 'torch/include/*' 'torch/share/*' -d "$tmp" \
    || die "could not unpack the torch wheel into $tmp"
  local extra="$tmp/extra"; mkdir -p "$extra"
  for w in "$WHEELS"/nvidia_*.whl; do unzip -q -o "$w" -d "$extra"; done
  # libtorch_cuda needs these three; the system CUDA 13 toolkit provides the rest (cudart, cublas, cudnn, nccl).
  find "$extra" \( -name 'libcusparseLt.so*' -o -name 'libcufile*.so*' -o -name 'libnvshmem_host.so*' \) -exec cp {} "$tmp/torch/lib/" \;
  rm -rf "$extra"
  rm -rf "$PREFIX"; mv "$tmp" "$PREFIX"
  touch "$STAMP"
}

install_apt
install_libtorch
echo "$PREFIX/torch"
