#!/usr/bin/env python3
"""zshard's host AdamW step beside torch.optim.AdamW on the same shard sizes and threads, in
one run: each round runs `zshard bench optim --json` for a size (which also measures its own
ceilings, memcpy and a pass over the same streams), then torch's foreach AdamW, then its
fused AdamW where this torch has it on CPU, so a busy machine slows them alike. Rates are GB/s
of optimizer state touched, counted as zshard counts them: 28 bytes an element (the fp32
parameter, gradient and both moments read, the parameter and moments written), whatever
extra passes an implementation makes. Medians over the rounds; markdown on stdout.

    python3 bench/torch_adamw.py --zshard build/zshard --sizes 1M,16M,64M --threads 2
"""
import argparse
import json
import statistics
import subprocess
import time

import torch


def parse_size(text):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if mul > 1 else text) * mul


def torch_step_s(n, impl, reps):
    """Median seconds of reps AdamW steps on one n-element fp32 parameter (after one untimed
    step), or None where this torch lacks the implementation on CPU."""
    p = torch.nn.Parameter((torch.arange(n, dtype=torch.float32) % 65536) / 65536.0 - 0.5)
    p.grad = 0.01 * p.detach().clone()
    kw = {"foreach": True} if impl == "foreach" else {"fused": True}
    try:
        opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **kw)
        opt.step()
    except (RuntimeError, TypeError, ValueError):
        return None
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zshard", default="build/zshard", help="the zshard executable")
    ap.add_argument("--sizes", default="1M,16M,64M", help="elements per shard (K/M/G)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per size")
    ap.add_argument("--reps", type=int, default=5, help="timed steps per implementation a round")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"host AdamW, fp32, {a.threads} threads, torch {torch.__version__}, median of "
          f"{a.rounds} rounds x {a.reps} steps, interleaved\n")
    print("| elements | zshard GB/s | torch foreach GB/s | torch fused GB/s | memcpy GB/s | "
          "streams GB/s |\n|---:|---:|---:|---:|---:|---:|")
    for size in a.sizes.split(","):
        n = parse_size(size)
        rate = {"zshard": [], "foreach": [], "fused": [], "memcpy": [], "streams": []}
        for _ in range(a.rounds):
            out = subprocess.run([a.zshard, "bench", "optim", "--sizes", str(n), "--reps",
                                  str(a.reps), "--threads", str(a.threads), "--json"],
                                 check=True, capture_output=True, text=True).stdout
            z = json.loads(out.strip().splitlines()[-1])
            rate["zshard"].append(z["step_gbps"])
            rate["memcpy"].append(z["memcpy_gbps"])
            rate["streams"].append(z["streams_gbps"])
            for impl in ("foreach", "fused"):
                s = torch_step_s(n, impl, a.reps)
                if s is not None:
                    rate[impl].append(28.0 * n / s / 1e9)
        cell = {k: f"{statistics.median(v):.2f}" if v else "n/a" for k, v in rate.items()}
        print(f"| {n} | {cell['zshard']} | {cell['foreach']} | {cell['fused']} | "
              f"{cell['memcpy']} | {cell['streams']} |", flush=True)


if __name__ == "__main__":
    main()
