"""zshard.Trainer: the built-in GPT-2/LLaMA trainer (zs_trainer_*), fed from a data file or from
numpy batches. Every method that trains, evaluates or touches parameters is collective: with
several ranks (`zshard run -n 2 -- python script.py`) every rank calls it in the same order."""
import ctypes

import numpy as np

from ._lib import StepStats, ZshardError, call, dtype_of, enc, lib, stage_of

_TRAIN_KEYS = ("batch", "seq", "steps", "grad_accum", "lr", "min_lr_frac", "warmup",
               "weight_decay", "beta1", "beta2", "eps", "grad_clip", "seed", "prefetch", "vocab",
               "val_fraction", "device_mem", "comm_timeout_s")


def _i32(a, what):
    a = np.ascontiguousarray(a, dtype=np.int32)
    if a.ndim != 2:
        raise ValueError(f"{what} must be a 2-D [rows, seq] array of token ids")
    return a


class Trainer:
    """Trainer(model="gpt2-tiny", data=None, stage="ddp", dtype="fp32", **settings)

    model: a preset name (zs_model_preset) or a model config .json. data: a text file or llm.c
    token shard; None trains from memory only (then give vocab=). settings: batch (global rows
    per step), seq, steps, grad_accum, lr, warmup, weight_decay, grad_clip, seed, prefetch,
    vocab, ... as in zs_train_config. Raises ZshardError with zs_last_error()."""

    def __init__(self, model="gpt2-tiny", data=None, stage="ddp", dtype="fp32",
                 reduce_dtype="fp32", val=None, comm=None, **settings):
        cfg = lib.zs_train_config_default()
        call("zs_model_preset", enc(model), ctypes.byref(cfg.model))
        self._keep = [enc(data), enc(val), enc(comm)]  # the C config points at these bytes
        cfg.data_path, cfg.val_path, cfg.comm = self._keep
        cfg.stage = stage_of(stage)
        cfg.dtype = dtype_of(dtype)
        cfg.reduce_dtype = dtype_of(reduce_dtype)
        for k, v in settings.items():
            if k not in _TRAIN_KEYS:
                raise TypeError(f"unknown trainer setting {k!r}")
            setattr(cfg, k, v)
        self._cfg = cfg
        self._t = ctypes.c_void_p()
        call("zs_trainer_create", ctypes.byref(cfg), ctypes.byref(self._t))

    def close(self):
        """Free the trainer (not collective). Also on garbage collection."""
        if getattr(self, "_t", None):
            lib.zs_trainer_destroy(self._t)
            self._t = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def rank(self):
        return lib.zs_trainer_rank(self._t)

    @property
    def world_size(self):
        return lib.zs_trainer_world_size(self._t)

    @property
    def vocab(self):
        return lib.zs_trainer_vocab(self._t)

    @property
    def steps_done(self):
        return lib.zs_trainer_steps_done(self._t)

    def step(self, tokens=None, targets=None):
        """One optimizer step: the data's next batch, or tokens/targets int32 [rows, seq] with
        rows = batch / world_size (this rank's slice) or batch (the global batch, each rank
        takes its slice). Returns {"step", "loss", "lr", "grad_norm", "ms"}."""
        s = StepStats()
        if tokens is None:
            call("zs_trainer_step", self._t, ctypes.byref(s))
        else:
            tk, tg = _i32(tokens, "tokens"), _i32(targets, "targets")
            if tk.shape != tg.shape or tk.shape[1] != self._cfg.seq:
                raise ValueError(f"tokens and targets must both be [rows, {self._cfg.seq}]")
            call("zs_trainer_step_batch", self._t, _p32(tk), _p32(tg), tk.shape[0],
                 ctypes.byref(s))
        return {"step": s.step, "loss": s.loss, "lr": s.lr, "grad_norm": s.grad_norm, "ms": s.ms}

    def eval(self, tokens=None, targets=None, n_batches=1):
        """Mean loss: over n_batches validation batches of the data, or over the given batch
        (rows as in step)."""
        out = ctypes.c_float()
        if tokens is None:
            call("zs_trainer_eval", self._t, n_batches, ctypes.byref(out))
        else:
            tk, tg = _i32(tokens, "tokens"), _i32(targets, "targets")
            call("zs_trainer_eval_batch", self._t, _p32(tk), _p32(tg), tk.shape[0],
                 ctypes.byref(out))
        return out.value

    def logits(self, tokens):
        """float32 [rows, seq, vocab] logits of this rank's tokens int32 [rows, seq]."""
        tk = _i32(tokens, "tokens")
        out = np.empty((tk.shape[0], tk.shape[1], self.vocab), dtype=np.float32)
        call("zs_trainer_forward_logits", self._t, _p32(tk), tk.shape[0], tk.shape[1],
             out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        return out

    def generate(self, prompt="", n_tokens=32, temperature=0.0, seed=0):
        """Text after prompt (byte-level data), or token ids as text; greedy at temperature 0."""
        cap = 8 * n_tokens + 16
        buf = ctypes.create_string_buffer(cap)
        call("zs_trainer_sample", self._t, enc(prompt), n_tokens, temperature, seed, buf, cap)
        return buf.value.decode("utf-8", errors="replace")

    def save(self, save_dir, keep=0):
        """Checkpoint into save_dir/step_NNNNNNNN (collective); keep the newest keep (0: all)."""
        call("zs_trainer_save", self._t, enc(save_dir), keep)

    def resume(self, path):
        """Load a checkpoint (a checkpoint dir or a save dir) at any world size and stage."""
        call("zs_trainer_resume", self._t, enc(path))

    def set_lr(self, lr):
        """LR of the following steps; 0 returns to the schedule."""
        call("zs_trainer_set_lr", self._t, lr)

    def param_hash(self):
        h = ctypes.c_uint64()
        call("zs_trainer_param_hash", self._t, ctypes.byref(h))
        return f"{h.value:016x}"

    def get_param(self, name, shape=None):
        """Full fp32 values of a parameter (collective)."""
        from .module import Module
        m = Module._wrap(lib.zs_trainer_module(self._t))
        return m.get(name)

    def set_param(self, name, values):
        """Replace a parameter's master weights with rank 0's values (collective)."""
        from .module import Module
        Module._wrap(lib.zs_trainer_module(self._t)).set(name, values)

    def parameter_names(self):
        from .module import Module
        return list(Module._wrap(lib.zs_trainer_module(self._t)).tensors)

    def memory(self):
        """Per-rank memory statistics (collective): a list of {category: current bytes, ...}."""
        from .module import _mem_rows
        from ._lib import MemStats
        stats = (MemStats * self.world_size)()
        call("zs_trainer_gather_mem", self._t, stats)
        return _mem_rows(stats)


def _p32(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))


__all__ = ["Trainer", "ZshardError"]
