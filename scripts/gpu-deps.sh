#!/usr/bin/env bash
# Run HERE, before a session's GPU work: fetch the Debian packages that a bare GPU machine may
# lack to build zshard into .gpu-deps/, a git-ignored folder that the device call carries. The
# GPU machine reaches no registry, so scripts/gpu-check.sh unpacks them there (into a private
# prefix, never over /) when its own system lacks them. Debian 12's packages run on any newer
# glibc. What the GPU machine must have itself: the CUDA toolkit (nvcc, cuBLAS; NCCL from the
# toolkit or PyTorch's wheel), a C/C++ compiler and CMake (docs/cuda.md, "On a real GPU").
# tests/gpu_dryrun.sh proves the list in a bare root: add a package here when it shows one
# missing.
#   bash scripts/gpu-deps.sh          # then carry .gpu-deps to the GPU machine
#   ZS_GPU_DEPS_DIR=DIR               # somewhere else than .gpu-deps (the dry run's copy)
set -euo pipefail
cd "$(dirname "$0")/.."

# OpenBLAS (the OpenMP build, its headers and Fortran runtime), zstd (headers and library),
# libyaml (the CLI's --config files), libcrypto (the rendezvous store's HMAC), pkg-config
# (CMake finds zstd, libyaml and libcrypto through it).
PACKAGES=(libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libquadmath0 libzstd1
          libzstd-dev libyaml-0-2 libyaml-dev libssl3 libssl-dev pkgconf pkgconf-bin libpkgconf3)
LIMIT_MB=64 # what a device call carries in all

dir=${ZS_GPU_DEPS_DIR:-.gpu-deps}
mkdir -p "$dir"
cd "$dir"
rm -f ./*.deb
# As root, apt hands the download to its _apt user, which cannot write here; download as root
# then (the packages are verified against the signed lists either way). Lists that were never
# fetched (a fresh machine whose packages were all preinstalled) are fetched once.
download() { apt-get -qq -o APT::Sandbox::User=root download "${PACKAGES[@]}"; }
if ! download 2>/dev/null; then
    apt-get -qq update
    download
fi
ls -1 ./*.deb | sed 's|^\./|gpu-deps: |'
kb=$(du -sk . | cut -f1)
echo "gpu-deps: ${#PACKAGES[@]} packages, $((kb / 1024)).$(((kb % 1024) * 10 / 1024)) MiB in $dir (limit $LIMIT_MB MiB)"
if [ "$kb" -ge $((LIMIT_MB * 1024)) ]; then
    echo "gpu-deps: $dir is over the $LIMIT_MB MiB a device call carries" >&2
    exit 1
fi
