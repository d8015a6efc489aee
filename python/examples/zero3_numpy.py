# A numpy softmax regression sharded with ZeRO-3: zshard run -n 2 -- python zero3_numpy.py
import numpy as np
import zshard

comm = zshard.Comm()  # rank and world size from `zshard run`
units = zshard.Units().add_unit("layer")
units.add_tensor("w", (10, 4), decay=True, init="normal", std=0.1).add_tensor("b", (10,))
m = zshard.Module(units, comm=comm, stage=3)
rng = np.random.default_rng(comm.rank)  # each rank its own samples
x = rng.normal(size=(64, 4)).astype(np.float32)
y = np.argmax(x @ np.random.default_rng(0).normal(size=(4, 10)), axis=1)  # labels to learn
n = 64 * comm.world_size  # samples in the global batch
for step in range(100):
    m.zero_grad()
    with m.backward("layer") as (p, g):
        z = x @ p["w"].T + p["b"]
        e = np.exp(z - z.max(1, keepdims=True))
        prob = e / e.sum(1, keepdims=True)
        loss = m.allsum(-np.log(prob[np.arange(64), y]).sum()) / n
        dz = (prob - np.eye(10, dtype=np.float32)[y]) / n
        g["w"] += dz.T @ x  # add into the gradient buffer
        g["b"] += dz.sum(0)
    m.step(lr=0.05)
mem, h = m.memory(), m.param_hash()  # collective: every rank calls them
if comm.rank == 0:  # model states per rank = 16 * padded / world_size bytes
    print(f"loss {loss:.3f} hash {h} states {[r['model_states'] for r in mem]}")
    for row in zshard.mem.compare("gpt2-124m", world_sizes=(2,), seq=1024):
        print(row["stage"], row["model_states"] // 2**20, "MiB")
