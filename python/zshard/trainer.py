"""zshard.Trainer: the built-in GPT-2/LLaMA trainer (zs_trainer_*), fed from a data file or from
numpy batches. Every method that trains, evaluates or touches parameters is collective: with
several ranks (`zshard run -n 2 -- python script.py`) every rank calls it in the same order.
Names and defaults follow the CLI (`zshard train`, `eval`, `generate`); docs/embedding.md lists
what differs."""
import ctypes
import warnings

import numpy as np

from ._lib import ModelConfig, StepStats, ZshardError, call, dtype_of, enc, lib, stage_of

_TRAIN_KEYS = ("batch", "seq", "steps", "grad_accum", "lr", "min_lr_frac", "warmup",
               "weight_decay", "beta1", "beta2", "eps", "grad_clip", "seed", "prefetch", "vocab",
               "val_fraction", "comm_timeout_s", "epochs", "eos_id", "pad_id", "shard_group",
               "replicate")
# The settings zs_train_config carries in its module part (zs_module_config).
_MODULE_KEYS = ("seed", "prefetch", "shard_group", "replicate")
_DOCS = {"none": 0, "pack": 1, "concat": 2, "pad": 3}
_RECOMPUTE = {"none": 0, "block": 1}
_OFFLOAD = {"none": 0, "optimizer": 1, "params": 2}
_ATTENTION = {"flash": 0, "naive": 1}
_DEVICES = ("cpu", "cuda", "auto")


def _choice(what, value, table):
    key = str(value).lower()
    if key not in table:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(table)}")
    return key


def _i32(a, what):
    a = np.ascontiguousarray(a, dtype=np.int32)
    if a.ndim != 2:
        raise ValueError(f"{what} must be a 2-D [rows, seq] array of token ids")
    return a


def _same_model(src, named, model, path):
    """A model named next to init_from must be the source's (`zshard train --init-from`)."""
    for f in ("arch", "n_layer", "n_head", "n_kv_head", "n_embd", "ffn_hidden", "max_seq",
              "rope_theta", "norm_eps"):
        a, b = getattr(src, f), getattr(named, f)
        if a != b:
            raise ValueError(f"model {model!r} contradicts {path}: {f} is {a:g} there, {b:g} in "
                             f"model= (leave model out to take the source's model)")


class Trainer:
    """Trainer(model=None, data=None, stage="ddp", dtype="fp32", init_from=None, **settings)

    model: a preset name (zs_model_preset) or a model config .json; None is gpt2-tiny, or with
    init_from the source's model (as `zshard train --init-from` without --model). data: a text
    file or llm.c token shard (`--data`); None trains from memory only (then give vocab=). val:
    a separate validation file (`--val-data`). init_from: weights only from a zshard
    checkpoint, safetensors file, Hugging Face directory or llm.c model file (step 0, fresh
    optimizer, this run's schedule; zs_trainer_init_from). reduce_dtype: gradient dtype, None =
    dtype. recompute "none"|"block", attention "flash"|"naive", device "cpu"|"cuda"|"auto",
    tf32, device_mem (bytes, or a size such as "4G"), offload "none"|"optimizer"|"params" and
    offload_fraction (GPU ranks: `--offload`, `--offload-fraction`; docs/sharding.md). docs "none"|"pack"|"concat"|"pad" and
    doc_sep: documents as `--docs` and `--doc-sep` read them (docs/data.md). settings: batch
    (global rows per step), seq, steps, grad_accum, lr, min_lr_frac, warmup, weight_decay,
    grad_clip, seed, prefetch, vocab, val_fraction, comm_timeout_s, beta1, beta2, eps, epochs,
    eos_id, pad_id, shard_group (a size, or "host") and replicate (hybrid sharding, `--shard-group`,
    `--replicate`), as in zs_train_config; the defaults are `zshard train`'s (with epochs and
    no steps, the epochs set the length). Raises ZshardError with zs_last_error()."""

    def __init__(self, model=None, data=None, stage="ddp", dtype="fp32", reduce_dtype=None,
                 val=None, comm=None, init_from=None, device=None, recompute="none",
                 attention="flash", tf32=False, device_mem=0, docs="none", doc_sep=None,
                 offload="none", offload_fraction=None, **settings):
        cfg = lib.zs_train_config_default()
        if init_from is not None:
            # The source's model; a named model is a hint it must agree with (as the CLI).
            hint = None
            if model is not None:
                hint = ModelConfig()
                call("zs_model_preset", enc(model), ctypes.byref(hint))
            call("zs_model_config_from", enc(init_from),
                 None if hint is None else ctypes.byref(hint), ctypes.byref(cfg.model))
            if hint is not None:
                _same_model(cfg.model, hint, model, init_from)
            if cfg.model.vocab != 256:  # token shards take the source's vocabulary
                cfg.vocab = cfg.model.vocab
        else:
            call("zs_model_preset", enc("gpt2-tiny" if model is None else model),
                 ctypes.byref(cfg.model))
        if device is not None:
            _choice("device", device, _DEVICES)
        # The C config points at these.
        self._keep = [enc(data), enc(val), enc(comm), enc(device), enc(doc_sep)]
        cfg.data_path, cfg.val_path, cfg.comm, cfg.module.device, cfg.doc_sep = self._keep
        cfg.docs = _DOCS[_choice("docs", docs, _DOCS)]
        if "epochs" in settings and "steps" not in settings:
            cfg.steps = 0  # as `zshard train --epochs N`: the epochs set the length
        cfg.module.stage = stage_of(stage)
        cfg.module.param_dtype = dtype_of(dtype)
        cfg.module.grad_dtype = dtype_of(dtype if reduce_dtype is None else reduce_dtype)
        cfg.recompute = _RECOMPUTE[_choice("recompute", recompute, _RECOMPUTE)]
        cfg.attention = _ATTENTION[_choice("attention", attention, _ATTENTION)]
        cfg.module.tf32 = 1 if tf32 else 0
        cfg.module.offload = _OFFLOAD[_choice("offload", offload, _OFFLOAD)]
        if offload_fraction is not None:
            cfg.module.offload_fraction = float(offload_fraction)
        if isinstance(device_mem, str):
            cap = ctypes.c_uint64()
            call("zs_parse_bytes", enc(device_mem), ctypes.byref(cap))
            cfg.device_mem = cap.value
        else:
            cfg.device_mem = device_mem
        for k, v in settings.items():
            if k not in _TRAIN_KEYS:
                raise TypeError(f"unknown trainer setting {k!r}")
            if k == "shard_group" and v == "host":
                v = -1  # ZS_SHARD_GROUP_HOST: a group per host
            setattr(cfg.module if k in _MODULE_KEYS else cfg, k, v)
        self._cfg = cfg
        self._t = ctypes.c_void_p()
        call("zs_trainer_create", ctypes.byref(cfg), ctypes.byref(self._t))
        if init_from is not None:
            call("zs_trainer_init_from", self._t, enc(init_from))

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

    @property
    def steps(self):
        """The run's length (steps=, or epochs= of documents): the learning-rate schedule spans
        it, step() stops there."""
        return lib.zs_trainer_total_steps(self._t)

    @property
    def model(self):
        """The model's configuration: a dict of zs_model_config's fields."""
        m = lib.zs_trainer_model(self._t).contents
        return {f: (getattr(m, f).decode() if f == "name" else getattr(m, f))
                for f, _ in ModelConfig._fields_}

    def step(self, tokens=None, targets=None):
        """One optimizer step: the data's next batch, or tokens/targets int32 [rows, seq] with
        rows = batch / world_size (this rank's slice) or batch (the global batch, each rank
        takes its slice). Returns {"step", "loss", "lr", "grad_norm", "ms", "targets"} (targets:
        the real targets the loss averages, fewer than batch x seq with docs=). A step past
        steps= raises ZshardError (as `zshard train --steps N` stops at N)."""
        if self.steps_done >= self.steps:
            raise ZshardError("ZS_ERR_INVALID",
                              f"step {self.steps_done + 1}: this trainer was made for "
                              f"steps={self.steps} and has taken them all; the learning-"
                              f"rate schedule ends there. Make the Trainer with a larger steps= "
                              f"(and resume() a checkpoint to continue a run)")
        s = StepStats()
        if tokens is None:
            call("zs_trainer_step", self._t, ctypes.byref(s))
        else:
            tk, tg = _i32(tokens, "tokens"), _i32(targets, "targets")
            if tk.shape != tg.shape or tk.shape[1] != self._cfg.seq:
                raise ValueError(f"tokens and targets must both be [rows, {self._cfg.seq}]")
            call("zs_trainer_step_batch", self._t, _p32(tk), _p32(tg), tk.shape[0],
                 ctypes.byref(s))
        return {"step": s.step, "loss": s.loss, "lr": s.lr, "grad_norm": s.grad_norm, "ms": s.ms,
                "targets": s.targets}

    def eval(self, tokens=None, targets=None, n_batches=8):
        """Mean loss: over n_batches validation batches of the data (8, as `zshard train
        --val-batches` and `zshard eval --batches`, so the same settings give the same number;
        "all" covers the validation split once), or over the given batch (rows as in step)."""
        out = ctypes.c_float()
        if tokens is None:
            if n_batches == "all":
                n_batches = lib.zs_trainer_val_batches(self._t)
            elif isinstance(n_batches, str) or int(n_batches) < 1:
                raise ValueError(f"n_batches {n_batches!r} is not a positive count or 'all'")
            call("zs_trainer_eval", self._t, int(n_batches), ctypes.byref(out))
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

    def generate(self, prompt=None, max_tokens=200, temperature=0.8, top_k=0, top_p=1.0,
                 seed=1337, eos=None, no_cache=False, n_tokens=None):
        """Continue prompt by up to max_tokens tokens (zs_trainer_generate: KV cache, the
        `zshard generate` flags and defaults). Byte-level models: prompt is text (None = a
        newline) and the generated text is returned, without the prompt. Token models: prompt
        is a sequence of token ids (None = the EOS token, else 0) and a list of ids is returned.
        temperature 0 is greedy; eos (None: 50256 for GPT-2's vocabulary, else -1 = never)
        stops after that token. The window is the trainer's seq. n_tokens is a deprecated name
        of max_tokens."""
        if n_tokens is not None:
            if max_tokens != 200:
                raise TypeError("generate(): give max_tokens only (n_tokens is its old name)")
            warnings.warn("generate(n_tokens=) is deprecated: use max_tokens= (as `zshard "
                          "generate --max-tokens`)", DeprecationWarning, stacklevel=2)
            max_tokens = n_tokens
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0 (got {max_tokens})")
        g = lib.zs_gen_config_default()
        g.max_tokens, g.temperature, g.top_k, g.top_p = max_tokens, temperature, top_k, top_p
        g.seed, g.no_cache = seed, 1 if no_cache else 0
        vocab = lib.zs_trainer_model(self._t).contents.vocab
        g.eos = (50256 if vocab == 50257 else -1) if eos is None else eos
        text = vocab == 256
        if text:
            if isinstance(prompt, (list, tuple, np.ndarray)):
                raise ValueError("this is a byte-level model: give the prompt as text")
            if prompt is not None and not prompt:
                raise ValueError("the prompt is empty: give some text, or leave prompt out to "
                                 "start from a newline")
            raw = (prompt.encode() if isinstance(prompt, str) else bytes(prompt or b"\n"))
            ids = np.frombuffer(raw, dtype=np.uint8).astype(np.int32)
        else:
            if isinstance(prompt, (str, bytes)):
                raise ValueError(f"the model has a vocabulary of {vocab} tokens: give the prompt "
                                 f"as token ids; text prompts need a byte-level model")
            ids = np.ascontiguousarray([g.eos if g.eos >= 0 else 0] if prompt is None
                                       else prompt, dtype=np.int32).reshape(-1)
            if ids.size == 0:
                raise ValueError("the prompt has no token ids")
        out = np.empty(max(max_tokens, 1), dtype=np.int32)
        n = ctypes.c_int()
        call("zs_trainer_generate", self._t, ctypes.byref(g), _p32(ids), ids.size, _p32(out),
             max_tokens, ctypes.byref(n))
        got = out[:n.value]
        if text:
            return got.astype(np.uint8).tobytes().decode("utf-8", errors="replace")
        return got.tolist()

    def save(self, save_dir, keep=0):
        """Checkpoint into save_dir/step_NNNNNNNN (collective); keep the newest keep (0: all)."""
        call("zs_trainer_save", self._t, enc(save_dir), keep)

    def resume(self, path):
        """Load a checkpoint (a checkpoint dir or a save dir) at any world size and stage."""
        call("zs_trainer_resume", self._t, enc(path))

    def init_from(self, path):
        """Load only the weights of a source (as the init_from= argument): step 0, fresh
        optimizer. Collective."""
        call("zs_trainer_init_from", self._t, enc(path))

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
