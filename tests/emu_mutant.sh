#!/usr/bin/env bash
# A check run against a deliberately broken build of the GPU code (docs/cuda.md, "The emulated
# GPU", paragraph "Proof that it catches what it must"): passes only when the check FAILS
# (non-zero exit) and its output shows the failure the mutation must cause (an extended regex),
# so a mutant that survives, or a check that dies of something else, fails here.
# Usage: emu_mutant.sh REGEX -- COMMAND...
set -u
want=$1
shift
[ "${1:-}" = "--" ] && shift
out=$("$@" 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then
    echo "mutant survived: '$*' passed on the broken build"
    printf '%s\n' "$out" | tail -n 20
    exit 1
fi
if [ "$rc" -eq 77 ]; then
    printf '%s\n' "$out" | tail -n 3
    exit 77
fi
if ! grep -Eq -- "$want" <<<"$out"; then
    echo "the check failed (exit $rc) but not with /$want/:"
    printf '%s\n' "$out" | tail -n 30
    exit 1
fi
echo "mutant caught (exit $rc): $(grep -E -m1 -- "$want" <<<"$out" | cut -c1-300)"
exit 0
