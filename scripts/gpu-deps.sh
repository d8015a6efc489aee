#!/usr/bin/env bash
# Run HERE, before a session's GPU work: fetch the Debian packages that a bare GPU machine may
# lack to build zshard (OpenBLAS with its headers, zstd's headers, pkg-config) into .gpu-deps/,
# a git-ignored folder that the device call carries. The GPU machine reaches no registry, so
# scripts/gpu-check.sh unpacks them there (into a private prefix, never over /) when its own
# system lacks them. Debian 12's packages run on any newer glibc.
#   bash scripts/gpu-deps.sh          # then carry .gpu-deps to the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libquadmath0 libzstd1
          libzstd-dev pkgconf pkgconf-bin libpkgconf3)

mkdir -p .gpu-deps
cd .gpu-deps
rm -f ./*.deb
# As root, apt hands the download to its _apt user, which cannot write here; download as root
# then (the packages are verified against the signed lists either way).
apt-get -qq -o APT::Sandbox::User=root download "${PACKAGES[@]}"
ls -1 ./*.deb | sed 's|^\./|gpu-deps: |'
du -sh . | sed 's|^|gpu-deps: |'
