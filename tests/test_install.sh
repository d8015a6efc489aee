#!/usr/bin/env bash
# cmake --install into a fresh prefix, then build examples/mlp_lm out of tree through the CMake
# package (zshard::zshard and zshard::zshard_static) and through pkg-config (shared, and
# --static with libzshard.a), and check that every binary trains to the in-tree build's hash.
# Skips (77) in the sanitizer build. Usage: test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
B=$(cd "$1" && pwd)
S=$(cd "$2" && pwd)
T=$(mktemp -d /tmp/zshard-install-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if grep -q '^ZS_SANITIZE:BOOL=ON$' "$B/CMakeCache.txt"; then
    echo "SKIP: a sanitizer build (scripts/sanitize.sh): its libraries need ASan's and UBSan's" \
         "runtimes, which the out-of-tree builds do not link; the normal build tests the install"
    exit 77
fi
command -v pkg-config >/dev/null || fail "pkg-config is missing (scripts/setup.sh installs it)"

cmake --install "$B" --prefix "$T/prefix" > "$T/install.log" || { cat "$T/install.log"; fail install; }
for f in include/zshard.h include/zshard/module.h include/zshard/comm.h lib/libzshard.a lib/libzshard.so \
         lib/cmake/zshard/zshard-config.cmake lib/pkgconfig/zshard.pc; do
    [ -e "$T/prefix/$f" ] || fail "not installed: $f"
done

# The in-tree example's hash is the reference.
hash_of() { "$B/zshard" run -n 2 -- "$1" --stage 3 --steps 4 2>&1 | grep -o 'result hash [0-9a-f]*' ; }
want=$(hash_of "$B/mlp_lm")
[ "${#want}" = 28 ] || fail "in-tree mlp_lm gave no result"

# 1. find_package(zshard): the example's own CMakeLists.txt.
cmake -S "$S/examples/mlp_lm" -B "$T/cm" -DCMAKE_PREFIX_PATH="$T/prefix" > "$T/cm.log" 2>&1 ||
    { cat "$T/cm.log"; fail "find_package(zshard) configure"; }
cmake --build "$T/cm" > "$T/cmb.log" 2>&1 || { cat "$T/cmb.log"; fail "find_package build"; }
for exe in mlp_lm mlp_lm_static; do
    [ "$(hash_of "$T/cm/$exe")" = "$want" ] || fail "find_package $exe: hash differs"
done
# ldd's output held first: grep -q exiting at the first match would SIGPIPE ldd under pipefail.
grep -q "$T/prefix/lib/libzshard.so" <<<"$(ldd "$T/cm/mlp_lm")" || fail "zshard::zshard is not the shared lib"
! grep -q libzshard <<<"$(ldd "$T/cm/mlp_lm_static")" || fail "zshard::zshard_static links the .so"
echo "find_package(zshard): zshard::zshard and zshard::zshard_static build and train ($want)"

# 2. pkg-config, shared and static.
export PKG_CONFIG_PATH="$T/prefix/lib/pkgconfig"
CC=${CC:-cc}
$CC -std=c11 -O2 "$S/examples/mlp_lm/mlp_lm.c" -o "$T/pc_shared" $(pkg-config --cflags --libs zshard) \
    -lm -Wl,-rpath,"$T/prefix/lib" || fail "pkg-config shared link"
libs=$(pkg-config --static --libs zshard | sed 's/-lzshard /-Wl,-Bstatic -lzshard -Wl,-Bdynamic /')
$CC -std=c11 -O2 "$S/examples/mlp_lm/mlp_lm.c" -o "$T/pc_static" $(pkg-config --cflags zshard) \
    $libs -lm || fail "pkg-config --static link: $libs"
! grep -q libzshard <<<"$(ldd "$T/pc_static")" || fail "pkg-config static binary needs libzshard.so"
for exe in pc_shared pc_static; do
    [ "$(hash_of "$T/$exe")" = "$want" ] || fail "pkg-config $exe: hash differs"
done
echo "pkg-config zshard: shared and --static builds train ($want)"
