#!/usr/bin/env bash
# Install zshard's build dependencies from Debian's packages and build it into ./build.
# Works as root or through sudo on a fresh Debian 12. Safe to re-run: it skips apt when every
# package is already installed and rebuilds incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: run as root or install sudo" >&2; exit 1; }
    SUDO="sudo"
fi

# Build: compiler, CMake, OpenBLAS (OpenMP flavour, so BLAS and our loops share one thread
# pool), OpenMP, zstd, libssl-dev (libcrypto: the rendezvous store's HMAC), libyaml (train
# --config files). Data: `fortunes`, an offline English corpus from Debian itself, and the
# fortune files of other languages (German, Russian, Chinese, Spanish, Italian, Polish, Czech,
# Bulgarian): real multilingual text for the tokenizer parity test and benchmark.
# Tools: gnuplot draws the memory charts, Open MPI serves the MPI comm backend, libgloo-dev the
# gloo backend (CPU ranks across hosts), iproute2 the network namespaces that stand in for
# hosts in the multihost test and benchmark (ip netns, tc), iperf3 that benchmark's link rate.
# Python: the package in python/ runs in a virtual environment that sees Debian's numpy,
# pytest, setuptools and wheel (Debian's packages, so no other registry has to be reachable).
# debootstrap: the GPU check's dry run builds a bare Debian root with it (tests/gpu_dryrun.sh).
# ca-certificates: pip's TLS to PyPI (for `tokenizers`, below) fails on a fresh root without.
# clang, libclang-rt-14-dev (its sanitizer and libFuzzer runtimes) and libomp-14-dev (its OpenMP
# runtime, without which CMake finds no OpenMP for clang): the sanitizer build and the fuzz
# targets of the test command (scripts/sanitize.sh, scripts/fuzz.sh, docs/testing.md).
PACKAGES=(build-essential cmake pkg-config libopenblas-openmp-dev libzstd-dev libssl-dev libyaml-dev fortunes
          fortunes-de fortunes-ru fortunes-zh fortunes-es fortunes-it fortunes-pl fortunes-cs
          fortunes-bg gnuplot-nox openmpi-bin libopenmpi-dev libgloo-dev iproute2 iperf3 procps
          python3 python3-venv python3-numpy python3-pytest python3-setuptools python3-wheel
          ca-certificates debootstrap clang libclang-rt-14-dev libomp-14-dev)

# The packages of "$@" that dpkg does not have installed, one a line.
not_installed() {
    local p
    for p in "$@"; do
        [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] || echo "$p"
    done
}

mapfile -t missing < <(not_installed "${PACKAGES[@]}")
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    apt_updated=1
fi

# Slurm (slurm-wlm: slurmctld, slurmd, the client commands) and munge: the cluster that
# tests/test_slurm.sh starts in its namespace hosts, with its own key, config and daemons that
# live only during that test. Installed so that nothing starts at install time (policy-rc.d
# answers 101, "not allowed", for the duration) and munge's postinst finds a key and need not
# make one as its own user (which fails in a root where that user cannot run /bin/sh). Optional:
# when the install fails, it is rolled back (apt stays usable), setup warns, and the slurm test
# skips (77) saying why.
SLURM_PACKAGES=(slurm-wlm munge)
mapfile -t slurm_missing < <(not_installed "${SLURM_PACKAGES[@]}")
if [ ${#slurm_missing[@]} -gt 0 ]; then
    echo "setup: installing ${slurm_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    [ "${apt_updated:-0}" = 1 ] || $SUDO apt-get update -qq
    policy_made=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
        $SUDO chmod 755 /usr/sbin/policy-rc.d
        policy_made=1
    fi
    if [ ! -e /etc/munge/munge.key ]; then
        $SUDO mkdir -p /etc/munge
        $SUDO sh -c 'umask 077; head -c 1024 /dev/urandom > /etc/munge/munge.key'
    fi
    if ! $SUDO apt-get install -y -qq --no-install-recommends "${slurm_missing[@]}" >/dev/null; then
        echo "setup: warning: could not install ${slurm_missing[*]}; rolled back, the slurm test will skip" >&2
        $SUDO apt-get purge -y -qq munge slurm-wlm slurmctld slurmd slurm-client >/dev/null 2>&1 || true
        $SUDO dpkg --configure -a >/dev/null 2>&1 || true
    fi
    [ "$policy_made" = 0 ] || $SUDO rm -f /usr/sbin/policy-rc.d
fi

# If the pthreads OpenBLAS is also installed, Debian's alternatives may prefer it; point the
# linker and loader at the OpenMP build so OpenBLAS and zshard's OpenMP loops do not run two
# competing thread pools on the same cores.
for alt in libopenblas.so-x86_64-linux-gnu libopenblas.so.0-x86_64-linux-gnu; do
    target=$(update-alternatives --list "$alt" 2>/dev/null | grep openblas-openmp | head -n1 || true)
    if [ -n "$target" ] && [ "$(readlink -f "/etc/alternatives/$alt")" != "$(readlink -f "$target")" ]; then
        $SUDO update-alternatives --set "$alt" "$target" >/dev/null
    fi
done

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DZS_WERROR="${ZS_WERROR:-ON}" >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/zshard"

# The Python package (python/) installed with pip into build/pyvenv, as a user would install it;
# ctest's `python` test runs its pytest suite with that interpreter. The venv is Debian's
# python3 (/usr/bin: a python3 earlier on PATH, e.g. pyenv's, would not see Debian's packages)
# with the system's site-packages (numpy, pytest, setuptools, wheel: nothing is downloaded), and the
# package itself is reinstalled offline on every run, bundling build/libzshard.so and build/zshard
# (python/setup.py), so that `import zshard` needs no ZSHARD_LIB. A venv from an earlier setup
# that cannot import them is made again.
PY=build/pyvenv/bin/python
if [ -x "$PY" ] && ! "$PY" -c "import numpy, pytest, setuptools, wheel" 2>/dev/null; then
    rm -rf build/pyvenv
fi
[ -x "$PY" ] || /usr/bin/python3 -m venv --system-site-packages build/pyvenv
"$PY" -m pip install -q --no-deps --no-build-isolation --force-reinstall ./python
echo "setup: installed the python package into build/pyvenv"

# Hugging Face `tokenizers` (PyPI) in the same venv: the reference the hf_parity test compares
# zshard's ids with, and bench/tokenize_bench.sh's rival. Optional: when PyPI cannot be reached
# setup warns and goes on, and hf_parity skips (77) saying why. Pinned: the version the parity
# test was checked against, so that a new release cannot change CI's reference under it.
if ! "$PY" -c "import tokenizers" 2>/dev/null; then
    if "$PY" -m pip install -q --disable-pip-version-check --timeout 30 --retries 1 tokenizers==0.23.3; then
        echo "setup: installed tokenizers into build/pyvenv"
    else
        echo "setup: warning: could not install tokenizers from PyPI; the hf_parity test will skip" >&2
    fi
fi
