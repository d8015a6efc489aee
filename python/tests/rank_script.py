"""One rank of test_two_ranks_zero3_from_python: `zshard run -n 2 -- python rank_script.py
STAGE DIR`. A numpy MLP on the sharding API and a GPT-2 trainer fed from memory, at STAGE."""
import json
import sys

import numpy as np

import zshard

stage, out_dir = sys.argv[1], sys.argv[2]
comm = zshard.Comm()
rank, world = comm.rank, comm.world_size
V, C, B = 16, 8, 8  # vocabulary, width, global batch (rows of one token)


def declare():
    u = zshard.Units()
    u.add_unit("embed").add_tensor("emb", (V, C), decay=True, init="normal", std=0.5)
    u.add_unit("head").add_tensor("out", (V, C), decay=True, init="normal", std=0.5)
    return u


def train(m, steps, first=1):
    for s in range(first, first + steps):
        rows = np.arange(rank * B // world, (rank + 1) * B // world)
        tok = (rows * 3 + s) % V
        tgt = (tok * 5 + 1) % V
        m.zero_grad()
        m.step_ahead(lr=0.1)  # the step's settings early (acts only when offloaded, no clip)
        with m.forward("embed") as p:
            h = p["emb"][tok]
        with m.forward("head") as p:
            z = h @ p["out"].T
        pr = np.exp(z - z.max(1, keepdims=True))
        pr /= pr.sum(1, keepdims=True)
        dz = (pr - np.eye(V, dtype=np.float32)[tgt]) / B  # the global mean's gradient
        with m.backward("head") as (p, g):
            g["out"] += dz.T @ h
            dh = dz @ p["out"]
        with m.backward("embed") as (p, g):
            np.add.at(g["emb"], tok, dh)
        m.step(lr=0.1)


m = zshard.Module(declare(), comm=comm, stage=stage)
train(m, 3)
m.save(out_dir)
train(m, 3, first=4)
res = {"world": world, "module_hash": m.param_hash(), "padded": m.num_padded,
       "mem": m.memory()}
r = zshard.Module(declare(), comm=comm, stage=stage)
r.resume(out_dir)
train(r, 3, first=4)
res["resumed_hash"] = r.param_hash()

t = zshard.Trainer("gpt2-tiny", vocab=64, batch=4, seq=8, steps=5, stage=stage)
tok = (np.arange(32, dtype=np.int32).reshape(4, 8) * 7) % 64
for _ in range(2):
    t.step(tok, (tok + 1) % 64)  # the global batch: each rank takes its rows
res["trainer_hash"] = t.param_hash()
if rank == 0:
    print("RESULT " + json.dumps(res), flush=True)
