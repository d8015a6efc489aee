#!/usr/bin/env bash
# --docs pack, concat and pad on one real document corpus, the same steps and seed: Debian's
# fortunes (every file of /usr/share/games/fortunes, documents ended by '%' lines, read byte by
# byte), each model then evaluated on the held-out documents with all three modes
# (docs/data.md, "Pack, concat or pad: a measurement"). Usage: bench/docs_modes.sh [OUT_DIR]
# [STEPS]; ZSHARD=path/to/zshard (default build/zshard).
set -euo pipefail
OUT=${1:-docs-modes}
STEPS=${2:-600}
Z=${ZSHARD:-build/zshard}
mkdir -p "$OUT"
# Each file's fortunes, then a '%' line unless the file ends with one, so that no two
# documents of different files run together; every 10th document is held out for validation
# (from every file alike, so that validation is the training distribution).
for f in $(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | sort); do
    cat "$f"
    [ "$(tail -c 2 "$f")" = "%" ] || printf '\n%%\n'
done | awk -v train="$OUT/train.txt" -v val="$OUT/val.txt" '
    { doc = doc $0 "\n" }
    $0 == "%" { printf "%s", doc > (n++ % 10 == 9 ? val : train); doc = "" }'
COMMON=(--model gpt2-mini --data "$OUT/train.txt" --val-data "$OUT/val.txt" --doc-sep %
        --batch 16 --seq 128
        --steps "$STEPS" --lr 3e-3 --warmup 30 --seed 1337 --val-every 0 --val-batches 40
        --sample-len 0 --print-every 100)
for m in pack concat pad; do
    rm -rf "$OUT/ck-$m"
    "$Z" train "${COMMON[@]}" --docs "$m" --save-dir "$OUT/ck-$m" --log "$OUT/$m.jsonl" \
        > "$OUT/$m.out"
    tail -2 "$OUT/$m.out"
done
echo "| trained with | real targets per step | val loss, --docs pack | concat | pad |"
echo "|---|---:|---:|---:|---:|"
for m in pack concat pad; do
    targets=$(grep -o '"targets":[0-9]*' "$OUT/$m.jsonl" | awk -F: '{s += $2; n++} END {printf "%.0f", s / n}')
    row="| $m | $targets |"
    for e in pack concat pad; do
        loss=$("$Z" eval "$OUT/ck-$m" --data "$OUT/train.txt" --val-data "$OUT/val.txt" \
                   --docs "$e" --batches 40 --json |
               grep -o '"loss":[0-9.]*' | cut -d: -f2)
        row="$row $(printf '%.4f' "$loss") |"
    done
    echo "$row"
done
