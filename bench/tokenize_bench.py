#!/usr/bin/env python3
"""Tokenize throughput: `zshard tokenize` against the Hugging Face `tokenizers` library's
encode_batch, side by side in one run, rounds interleaved, on real multilingual documents
(Debian's fortune files, tests/hf_tok_families.py) for the three tokenizer families.

zshard is timed end to end as a user runs it (a process that loads the tokenizer, reads the
files, encodes, writes the shards); tokenizers only around encode_batch on documents already in
memory. Both at every core this process may use, and both at one thread (tokenizers with
RAYON_NUM_THREADS=1 in a child process). MB/s = UTF-8 bytes of the documents / seconds, the
median of the rounds. usage: tokenize_bench.py BUILD_DIR [ROUNDS] [VOCAB]"""
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import hf_tok_families as F  # noqa: E402

CHILD = r"""
import sys, time, json
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
texts = json.load(open(sys.argv[2]))
t = time.perf_counter(); tok.encode_batch(texts); print(time.perf_counter() - t)
"""


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 16000
    zshard = os.path.join(build, "zshard")
    try:
        import tokenizers
        from tokenizers import Tokenizer
    except ImportError as e:
        print("tokenize_bench: the tokenizers library cannot be imported (%s); scripts/setup.sh "
              "installs it into build/pyvenv" % e)
        return 77
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="zs_tok_bench_") as tmp:
        corpus = F.write_corpus(os.path.join(tmp, "corpus"))
        texts = [t for _, ds in corpus for t in ds]
        mb = sum(len(t.encode()) for t in texts) / 1e6
        import json
        tj = os.path.join(tmp, "texts.json")
        json.dump(texts, open(tj, "w"))
        print("tokenize bench: %d documents, %.2f MB of %d fortune files (%s); vocab %d; "
              "tokenizers %s; %s, %d cores; load average %s" % (
                  len(texts), mb, len(corpus) - 1,
                  " ".join(sorted({os.path.basename(p).split("_")[1] for p, _ in corpus})),
                  vocab, tokenizers.__version__, cpu_model(), cores,
                  " ".join("%.1f" % x for x in os.getloadavg())))
        toks = {}
        for fam, make in F.FAMILIES.items():
            d = os.path.join(tmp, fam)
            F.save(make(texts, vocab), fam, d)
            toks[fam] = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        times = {(fam, k): [] for fam in F.FAMILIES for k in ("z", "h", "z1", "h1")}

        def run_zshard(fam, threads):
            t = time.perf_counter()
            subprocess.run([zshard, "tokenize", os.path.join(tmp, "corpus"), "--tokenizer",
                            os.path.join(tmp, fam), "--out", os.path.join(tmp, "out"),
                            "--doc-sep", "%", "--val-frac", "0", "--overwrite", "--quiet",
                            "--threads", str(threads)], check=True, stdout=subprocess.DEVNULL)
            return time.perf_counter() - t

        def run_hf(fam):
            t = time.perf_counter()
            toks[fam].encode_batch(texts)
            return time.perf_counter() - t

        def run_hf1(fam):
            env = dict(os.environ, RAYON_NUM_THREADS="1")
            out = subprocess.run([sys.executable, "-c", CHILD,
                                  os.path.join(tmp, fam, "tokenizer.json"), tj], env=env,
                                 check=True, capture_output=True, text=True).stdout
            return float(out.split()[-1])

        for r in range(rounds):
            for fam in F.FAMILIES:
                order = [("z", lambda: run_zshard(fam, cores)), ("h", lambda: run_hf(fam)),
                         ("z1", lambda: run_zshard(fam, 1)), ("h1", lambda: run_hf1(fam))]
                if r % 2:
                    order.reverse()
                for k, fn in order:
                    times[(fam, k)].append(fn())
        print()
        print("| family | zshard tokenize, %d threads | tokenizers encode_batch, %d threads | "
              "ratio | zshard, 1 thread | tokenizers, 1 thread | ratio |" % (cores, cores))
        print("|---|---|---|---|---|---|---|")
        worst = None
        for fam in F.FAMILIES:
            rate = {k: mb / statistics.median(times[(fam, k)]) for k in ("z", "h", "z1", "h1")}
            rz, r1 = rate["z"] / rate["h"], rate["z1"] / rate["h1"]
            worst = min(rz, r1) if worst is None else min(worst, rz, r1)
            print("| %s | %.2f MB/s | %.2f MB/s | %.2fx | %.2f MB/s | %.2f MB/s | %.2fx |" % (
                fam, rate["z"], rate["h"], rz, rate["z1"], rate["h1"], r1))
        print()
        print("median of %d interleaved rounds; load average at the end %s" % (
            rounds, " ".join("%.1f" % x for x in os.getloadavg())))
        print("zshard at least as fast as tokenizers in every row: %s (lowest ratio %.2fx)" % (
            "yes" if worst >= 1 else "NO", worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
