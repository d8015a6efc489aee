#!/usr/bin/env bash
# The GPU check's bare part, proven without a GPU (docs/cuda.md, "On a real GPU"): a fresh
# minimal Debian 12 root with only what a GPU machine is promised besides the toolkit (a C/C++
# compiler, CMake, ninja, Python), none of OpenBLAS, zstd, libyaml or pkg-config, the CUDA
# toolkit of this machine bind-mounted read-only, a copy of the checkout and the packages
# scripts/gpu-deps.sh carries. In it, `scripts/gpu-check.sh --dry-run` must configure and build
# the CUDA backend and the gpu tests for sm_90 and stop where a GPU is needed, saying so. First
# the same with libyaml left out of the carried packages, which must fail at configure naming
# libyaml: the dry run catches a package gpu-deps.sh forgets.
# Usage: gpu_dryrun.sh SOURCE_DIR. Needs root, debootstrap, chroot, mount and a Debian mirror
# (apt's); skips (77) saying why where these are missing. The roots are cached as tarballs in
# ZS_FRESH_CACHE (default /var/cache/zs-fresh, shared with shared/tools/fresh-debian-run).
set -euo pipefail
src=$(cd "$1" && pwd)
skip() {
    echo "SKIP: $*"
    exit 77
}
fail() {
    echo "FAIL: $*"
    exit 1
}
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot, mounts)"
command -v debootstrap >/dev/null || skip "debootstrap not installed (scripts/setup.sh installs it)"
command -v chroot >/dev/null || skip "no chroot"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || skip "no CUDA toolkit (nvcc) on this machine to make visible"
cuda=$(readlink -f "$(dirname "$nvcc")/..")
[ -f "$cuda/include/cuda_runtime.h" ] || skip "no cuda_runtime.h beside $nvcc"

cache=${ZS_FRESH_CACHE:-/var/cache/zs-fresh}
base=$cache/bookworm-minbase.tar
gpuroot=$cache/bookworm-gpu-machine.tar
mkdir -p "$cache"
work=$(mktemp -d /tmp/zs-gpudry.XXXXXX)
root=$work/root
mounts=()
cleanup() {
    local i
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[$i]}" 2>/dev/null || true; done
    if [ -n "${ZS_DRYRUN_KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
mnt() { # mount ARGS... TARGET
    mount "$@"
    mounts+=("${!#}")
}
in_root() { # run a command in the root with a clean environment
    chroot "$root" /usr/bin/env -i HOME=/root PATH="$cuda/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" \
        LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}
enter() { # the root's mounts
    mkdir -p "$root/proc" "$root/dev"
    mnt -t proc proc "$root/proc"
    mnt --rbind /dev "$root/dev"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
}
leave() {
    local i
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[$i]}"; done
    mounts=()
}

# ---- the roots: Debian minbase, then what the GPU machine is promised ---------------------------
if [ ! -f "$base" ]; then
    mirror=$(grep -hoE '(URIs:|^deb)[[:space:]]+https?://[^[:space:]]+/debian/?' \
        /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null | grep -v security |
        head -n 1 | awk '{print $2}' || true)
    [ -n "$mirror" ] || skip "no Debian mirror in apt's sources to build a root from"
    echo "building a minimal Debian 12 root from $mirror"
    mkdir -p "$work/base"
    debootstrap --variant=minbase bookworm "$work/base" "$mirror" >"$work/debootstrap.log" 2>&1 ||
        { tail -n 20 "$work/debootstrap.log"; skip "debootstrap could not build a root (above)"; }
    tar -C "$work/base" -cf "$base.tmp" . && mv "$base.tmp" "$base"
    rm -rf "$work/base"
fi
if [ ! -f "$gpuroot" ]; then
    echo "adding the GPU machine's compiler, CMake, ninja and Python to the root"
    mkdir -p "$root"
    tar -C "$root" -xf "$base"
    enter
    # the mirror is the network's: two tries, then a skip that says so
    ok=0
    for try in 1 2; do
        if in_root apt-get -qq update >"$work/apt.log" 2>&1 &&
            in_root apt-get -qq install -y --no-install-recommends gcc g++ make cmake ninja-build \
                python3 >>"$work/apt.log" 2>&1; then
            ok=1
            break
        fi
        sleep 5
    done
    [ "$ok" = 1 ] || { tail -n 20 "$work/apt.log"; skip "apt could not install the GPU machine's compiler and CMake in the root (the mirror, twice; above)"; }
    in_root apt-get -qq clean
    leave
    tar -C "$root" -cf "$gpuroot.tmp" . && mv "$gpuroot.tmp" "$gpuroot"
    rm -rf "$root"
fi

mkdir -p "$root"
tar -C "$root" -xf "$gpuroot"
# Bare: none of what gpu-deps.sh carries is there (the whole point of the dry run).
for f in cblas.h zstd.h yaml.h hmac.h; do
    [ -z "$(find "$root/usr/include" -name "$f" -print -quit)" ] || fail "the root already has $f"
done
[ ! -e "$root/usr/bin/pkg-config" ] && [ ! -e "$root/usr/bin/pkgconf" ] || fail "the root already has pkg-config"
enter
mkdir -p "$root$cuda"
mnt --bind "$cuda" "$root$cuda"
mount -o remount,bind,ro "$root$cuda"
proj=$root/root/project
mkdir -p "$proj"
(cd "$src" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) |
    tar -C "$proj" -xf -
ZS_GPU_DEPS_DIR=$work/deps bash "$src/scripts/gpu-deps.sh" ||
    ZS_GPU_DEPS_DIR=$work/deps bash "$src/scripts/gpu-deps.sh" ||
    skip "apt could not download the packages gpu-deps.sh carries (twice)"

# ---- 1. without libyaml: configure must fail, naming it -------------------------------------
mkdir -p "$proj/.gpu-deps"
cp "$work"/deps/*.deb "$proj/.gpu-deps/"
rm -f "$proj"/.gpu-deps/libyaml*.deb
set +e
in_root bash -c 'cd /root/project && OUT=/root/out-noyaml ZS_GPU_BUILD=/root/build-noyaml bash scripts/gpu-check.sh --dry-run' \
    >"$work/noyaml.log" 2>&1
rc=$?
set -e
if [ "$rc" = 0 ] || ! grep -q 'configure failed' "$root/root/out-noyaml/report.md" ||
    ! grep -q 'libyaml not found' "$root/root/out-noyaml/configure.out"; then
    tail -n 30 "$work/noyaml.log"
    fail "without libyaml's packages the dry run did not fail at configure naming libyaml (exit $rc)"
fi
echo "ok: without libyaml's packages, configure fails: $(grep -m1 'libyaml not found' "$root/root/out-noyaml/configure.out" | sed 's/^ *//')"

# ---- 2. with every carried package: build for sm_90 and stop where a GPU is needed ---------------
cp "$work"/deps/*.deb "$proj/.gpu-deps/"
t0=$(date +%s)
set +e
in_root bash -c 'cd /root/project && OUT=/root/out ZS_CUDA_ARCH=90 bash scripts/gpu-check.sh --dry-run' \
    >"$work/dry.log" 2>&1
rc=$?
set -e
report=$root/root/out/report.md
echo "---- gpu-check.sh --dry-run in the bare root (exit $rc, $(($(date +%s) - t0)) s): report"
cat "$report" 2>/dev/null || tail -n 40 "$work/dry.log"
echo "----"
[ "$rc" = 0 ] || { tail -n 40 "$work/dry.log"; fail "gpu-check.sh --dry-run exited $rc in the bare root"; }
grep -q 'stopped where a GPU is needed (--dry-run)' "$report" || fail "the report does not say where it stopped"
grep -q 'predict_small: exit 0' "$report" || fail "the emulated GPU's prediction did not run in the bare root"
grep -q 'dependencies: OpenBLAS zstd libyaml libcrypto pkg-config missing here; unpacked' "$report" ||
    fail "the report does not list the five missing dependencies as unpacked"
for b in zshard tests/test_cuda_ops tests/test_cuda_ops_attn tests/test_cuda_ops_state \
    tests/test_cuda_flash_tc tests/test_device_cuda tests/test_comm_nccl tests/comm_worker_gpu \
    tests/test_train_cuda tests/zshard-emu; do
    [ -x "$proj/build-gpu/$b" ] || fail "build-gpu/$b was not built"
done
# nvcc was asked for sm_90 code (the toolkit here may have no cuobjdump to read it back).
grep -q 'sm_90' "$proj/build-gpu/build.ninja" ||
    fail "the .cu files were not compiled for sm_90 (build-gpu/build.ninja)"
echo "ok: the CUDA backend and the gpu tests built for sm_90 in a bare root from the carried packages"
