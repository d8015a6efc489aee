"""zshard.mem: per-rank memory before a run (zs_mem_estimate_compute_opts, the same layout and
formulas as `zshard mem`), and the DDP / ZeRO comparison as rows (and a chart)."""
import ctypes

from ._lib import MEM_CATEGORIES, MemEstimate, MemOptions, call, dtype_of, enc, lib, stage_of

STAGES = ("ddp", "1", "2", "3")


def formula(stage, dtype="fp32", reduce_dtype=None):
    """The model-state bytes per rank (docs/architecture.md "Memory accounting") as (a, b):
    a·Ψ + b·Ψ/N. reduce_dtype: the gradients' dtype, None = dtype (as
    `zshard mem --reduce-dtype`)."""
    o = MemOptions(0, 0, dtype_of(dtype), dtype_of(dtype if reduce_dtype is None else reduce_dtype),
                   None)
    a, b = ctypes.c_int(), ctypes.c_int()
    lib.zs_mem_formula(stage_of(stage), ctypes.byref(o), ctypes.byref(a), ctypes.byref(b))
    return a.value, b.value


def _recompute(r):
    if r in (True, False):
        return int(r)
    if str(r).lower() not in ("none", "block"):
        raise ValueError(f"recompute {r!r} is not one of none, block")
    return int(str(r).lower() == "block")


def estimate(model="gpt2-tiny", world_size=1, stage="ddp", batch=None, seq=64, grad_accum=1,
             prefetch=1, vocab=None, dtype="fp32", reduce_dtype=None, recompute="none",
             attention="flash", device=None, offload="none", offload_fraction=None,
             shard_group=None, nnodes=1):
    """Predicted per-rank peak bytes: a dict of the categories (param, ..., comm) plus
    model_states, total, params (Ψ) and padded. The defaults are `zshard mem`'s (train's):
    batch is the global batch, None = 8, or one sequence per rank and micro-batch when 8 does
    not divide; vocab None = GPT-2's 50257, or 32000 for LLaMA models (256 for text data);
    reduce_dtype None = dtype; recompute "none"|"block" (or a bool); attention "flash"|"naive".
    device None|"cpu"|"cuda": whose memory is predicted. offload "none"|"optimizer"|"params" and
    offload_fraction (device "cuda"): the pinned host bytes come back as host_<category> and
    host_total. shard_group (hybrid sharding, a divisor of world_size): the state split over
    groups of that many ranks; nnodes: the hosts the ranks are on (comm staging)."""
    cfg = lib.zs_train_config_default().model
    call("zs_model_preset", enc(model), ctypes.byref(cfg))
    if vocab is None:
        vocab = 32000 if cfg.arch == 1 else 50257  # ZS_ARCH_LLAMA
    lib.zs_model_config_set_vocab(ctypes.byref(cfg), vocab)
    if str(attention).lower() not in ("flash", "naive"):
        raise ValueError(f"attention {attention!r} is not one of flash, naive")
    if offload not in ("none", "optimizer", "params"):
        raise ValueError(f"offload {offload!r} is not one of none, optimizer, params")
    keep = enc(device)
    o = MemOptions(_recompute(recompute), int(str(attention).lower() == "naive"),
                   dtype_of(dtype), dtype_of(dtype if reduce_dtype is None else reduce_dtype),
                   None, keep)
    o.offload = ("none", "optimizer", "params").index(offload)
    o.offload_fraction = 0.0 if offload_fraction is None else float(offload_fraction)
    o.shard_group = 0 if shard_group is None else int(shard_group)
    o.nnodes = int(nnodes)
    e = MemEstimate()
    per = world_size * grad_accum
    if batch is None:
        batch = 8 if 8 % per == 0 else per
    if batch % per:
        raise ValueError(f"batch {batch} does not divide into {world_size} rank(s) x "
                         f"{grad_accum} micro-batch(es)")
    call("zs_mem_estimate_compute_opts", ctypes.byref(cfg), world_size, stage_of(stage), batch,
         seq, grad_accum, prefetch, ctypes.byref(o), ctypes.byref(e))
    out = {c: int(e.bytes[i]) for i, c in enumerate(MEM_CATEGORIES)}
    out.update(model_states=int(e.model_states), total=int(e.total), params=int(e.params),
               padded=int(e.padded))
    if o.offload:
        out.update({"host_" + c: int(e.host_bytes[i]) for i, c in enumerate(MEM_CATEGORIES)})
        out["host_total"] = int(e.host_total)
    return out


def compare(model="gpt2-124m", world_sizes=(1, 2, 4, 8), plot=None, **kw):
    """The DDP / ZeRO-1/2/3 table: one row per (world_size, stage) with the estimate's fields
    and "formula" (a·Ψ + b·Ψ/N over the padded Ψ). plot: a file name to draw the per-rank
    model states with matplotlib (skipped, with a note in the return value, if matplotlib is
    not installed). Returns the rows (and, with plot, the chart's path or None)."""
    rows = []
    for n in world_sizes:
        for s in STAGES:
            e = estimate(model=model, world_size=n, stage=s, **kw)
            a, b = formula(s, kw.get("dtype", "fp32"), kw.get("reduce_dtype"))
            e.update(world_size=n, stage=s, formula=a * e["padded"] + b * e["padded"] // n)
            rows.append(e)
    if plot is None:
        return rows
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return rows, None
    fig, ax = plt.subplots(figsize=(6, 4))
    for s in STAGES:
        pts = [(r["world_size"], r["model_states"] / 2**30) for r in rows if r["stage"] == s]
        ax.plot(*zip(*pts), marker="o", label="ddp" if s == "ddp" else f"ZeRO-{s}")
    ax.set_xlabel("ranks")
    ax.set_ylabel("model states per rank (GiB)")
    ax.set_title(f"{model}: memory per rank")
    ax.legend()
    fig.savefig(plot)
    plt.close(fig)
    return rows, plot
