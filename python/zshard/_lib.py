"""Loading libzshard and mirroring the public structs of <zshard.h> for ctypes.

The library is, in this order: $ZSHARD_LIB (a path to libzshard.so: an override, which must
exist), the copy bundled into the package by `pip install ./python` (zshard/libzshard.so, see
python/setup.py), then the system's library search (after `cmake --install`). Every mirrored
struct is checked against zs_struct_size(), so a layout mismatch fails at import instead of
corrupting memory."""
import ctypes
import ctypes.util
import os
import shutil

_HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLED_LIB = os.path.join(_HERE, "libzshard.so")
BUNDLED_EXE = os.path.join(_HERE, "bin", "zshard")

c_float_p = ctypes.POINTER(ctypes.c_float)
c_int32_p = ctypes.POINTER(ctypes.c_int32)

NCAT = 9
MEM_CATEGORIES = ("param", "param_shard", "grad", "grad_shard", "optim_state", "gathered",
                  "activation", "workspace", "comm")
DTYPES = {"fp32": 0, "f32": 0, "bf16": 1}
STAGES = {"ddp": 0, "0": 0, "1": 1, "2": 2, "3": 3}


class ZshardError(RuntimeError):
    """A zshard call failed: .status is the status name (e.g. "ZS_ERR_INVALID"), the message is
    zs_last_error() of the failing call."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class ModelConfig(ctypes.Structure):
    _fields_ = [("arch", ctypes.c_int), ("n_layer", ctypes.c_int), ("n_head", ctypes.c_int),
                ("n_embd", ctypes.c_int), ("max_seq", ctypes.c_int), ("vocab", ctypes.c_int),
                ("padded_vocab", ctypes.c_int), ("n_kv_head", ctypes.c_int),
                ("ffn_hidden", ctypes.c_int), ("rope_theta", ctypes.c_float),
                ("norm_eps", ctypes.c_float), ("name", ctypes.c_char * 32),
                ("tie_embeddings", ctypes.c_int)]  # zs_tie: 0 arch default, 1 tied, 2 untied


class MemStats(ctypes.Structure):
    _fields_ = [("current", ctypes.c_uint64 * NCAT), ("peak", ctypes.c_uint64 * NCAT),
                ("total_current", ctypes.c_uint64), ("total_peak", ctypes.c_uint64),
                ("cap", ctypes.c_uint64)]


class MemEstimate(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint64 * NCAT), ("model_states", ctypes.c_uint64),
                ("total", ctypes.c_uint64), ("params", ctypes.c_int64),
                ("padded", ctypes.c_int64), ("host_bytes", ctypes.c_uint64 * NCAT),
                ("host_total", ctypes.c_uint64)]


class MemOptions(ctypes.Structure):
    _fields_ = [("recompute", ctypes.c_int), ("attention", ctypes.c_int),
                ("dtype", ctypes.c_int), ("reduce_dtype", ctypes.c_int),
                ("comm", ctypes.c_char_p), ("device", ctypes.c_char_p),
                ("docs", ctypes.c_int), ("offload", ctypes.c_int),
                ("offload_fraction", ctypes.c_double), ("shard_group", ctypes.c_int),
                ("nnodes", ctypes.c_int)]


class ModuleConfig(ctypes.Structure):
    _fields_ = [("stage", ctypes.c_int), ("prefetch", ctypes.c_int),
                ("param_dtype", ctypes.c_int), ("grad_dtype", ctypes.c_int),
                ("seed", ctypes.c_uint64), ("device", ctypes.c_char_p),
                ("name", ctypes.c_char_p), ("tf32", ctypes.c_int),
                ("offload", ctypes.c_int), ("offload_fraction", ctypes.c_double),
                ("shard_group", ctypes.c_int), ("replicate", ctypes.c_int)]


class TrainConfig(ctypes.Structure):
    _fields_ = [("model", ModelConfig), ("module", ModuleConfig), ("data_path", ctypes.c_char_p),
                ("val_path", ctypes.c_char_p), ("vocab", ctypes.c_int),
                ("val_fraction", ctypes.c_double), ("batch", ctypes.c_int),
                ("seq", ctypes.c_int), ("steps", ctypes.c_int), ("grad_accum", ctypes.c_int),
                ("lr", ctypes.c_float), ("min_lr_frac", ctypes.c_float),
                ("warmup", ctypes.c_int), ("weight_decay", ctypes.c_float),
                ("beta1", ctypes.c_float), ("beta2", ctypes.c_float), ("eps", ctypes.c_float),
                ("grad_clip", ctypes.c_float), ("device_mem", ctypes.c_uint64),
                ("comm", ctypes.c_char_p), ("comm_timeout_s", ctypes.c_double),
                ("recompute", ctypes.c_int), ("attention", ctypes.c_int),
                ("docs", ctypes.c_int), ("epochs", ctypes.c_int),
                ("eos_id", ctypes.c_int64), ("pad_id", ctypes.c_int64),
                ("doc_sep", ctypes.c_char_p)]


class StepStats(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int), ("loss", ctypes.c_float), ("lr", ctypes.c_float),
                ("grad_norm", ctypes.c_float), ("ms", ctypes.c_double),
                ("tokens_per_s", ctypes.c_double), ("targets", ctypes.c_int64)]


class CommConfig(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("timeout_s", ctypes.c_double),
                ("check", ctypes.c_int), ("debug_delay_s", ctypes.c_double),
                ("chunk_bytes", ctypes.c_size_t), ("device", ctypes.c_int),
                ("rank", ctypes.c_int), ("world_size", ctypes.c_int),
                ("local_rank", ctypes.c_int), ("local_world_size", ctypes.c_int),
                ("master_addr", ctypes.c_char_p), ("master_port", ctypes.c_int),
                ("backend_why", ctypes.c_char_p), ("gpu_buffers", ctypes.c_int)]


class TensorSpec(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * 4), ("dtype", ctypes.c_int), ("decay", ctypes.c_int),
                ("init", ctypes.c_int), ("init_std", ctypes.c_float),
                ("zero_from", ctypes.c_int64), ("values", c_float_p)]


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("index", ctypes.c_int), ("unit", ctypes.c_int),
                ("offset", ctypes.c_int64), ("count", ctypes.c_int64), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * 4), ("decay", ctypes.c_int)]


class GenConfig(ctypes.Structure):
    _fields_ = [("max_tokens", ctypes.c_int), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int), ("top_p", ctypes.c_float), ("seed", ctypes.c_uint64),
                ("eos", ctypes.c_int), ("max_seconds", ctypes.c_double),
                ("no_cache", ctypes.c_int)]


class AdamwConfig(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float),
                ("grad_clip", ctypes.c_float)]


_STRUCTS = {"zs_model_config": ModelConfig, "zs_mem_stats": MemStats,
            "zs_mem_estimate": MemEstimate, "zs_mem_options": MemOptions,
            "zs_train_config": TrainConfig, "zs_step_stats": StepStats,
            "zs_comm_config": CommConfig, "zs_tensor_spec": TensorSpec,
            "zs_module_config": ModuleConfig, "zs_tensor_info": TensorInfo,
            "zs_adamw_config": AdamwConfig, "zs_gen_config": GenConfig}

P = ctypes.c_void_p
I = ctypes.c_int
S = ctypes.c_char_p
# name: (restype, argtypes); restype int = zs_status, checked by call().
_SIGS = {
    "zs_status_string": (S, [I]), "zs_last_error": (S, []),
    "zs_struct_size": (ctypes.c_size_t, [S]),
    "zs_model_preset": (I, [S, ctypes.POINTER(ModelConfig)]),
    "zs_model_config_set_vocab": (None, [ctypes.POINTER(ModelConfig), I]),
    "zs_mem_formula": (None, [I, ctypes.POINTER(MemOptions), ctypes.POINTER(I), ctypes.POINTER(I)]),
    "zs_mem_estimate_compute_opts": (I, [ctypes.POINTER(ModelConfig), I, I, I, I, I, I,
                                         ctypes.POINTER(MemOptions), ctypes.POINTER(MemEstimate)]),
    "zs_mem_get_stats": (None, [ctypes.POINTER(MemStats)]),
    "zs_train_config_default": (TrainConfig, []),
    "zs_trainer_create": (I, [ctypes.POINTER(TrainConfig), ctypes.POINTER(P)]),
    "zs_trainer_destroy": (None, [P]),
    "zs_trainer_step": (I, [P, ctypes.POINTER(StepStats)]),
    "zs_trainer_step_batch": (I, [P, c_int32_p, c_int32_p, I, ctypes.POINTER(StepStats)]),
    "zs_trainer_eval": (I, [P, I, c_float_p]),
    "zs_trainer_eval_batch": (I, [P, c_int32_p, c_int32_p, I, c_float_p]),
    "zs_trainer_forward_logits": (I, [P, c_int32_p, I, I, c_float_p]),
    "zs_trainer_sample": (I, [P, S, I, ctypes.c_float, ctypes.c_uint64, ctypes.c_char_p,
                              ctypes.c_size_t]),
    "zs_trainer_param_hash": (I, [P, ctypes.POINTER(ctypes.c_uint64)]),
    "zs_trainer_set_lr": (I, [P, ctypes.c_float]),
    "zs_trainer_get_param": (I, [P, S, c_float_p, ctypes.c_size_t]),
    "zs_trainer_set_param": (I, [P, S, c_float_p, ctypes.c_size_t]),
    "zs_gen_config_default": (GenConfig, []),
    "zs_trainer_generate": (I, [P, ctypes.POINTER(GenConfig), c_int32_p, I, c_int32_p, I,
                                ctypes.POINTER(I)]),
    "zs_trainer_model": (ctypes.POINTER(ModelConfig), [P]),
    "zs_trainer_val_windows": (ctypes.c_int64, [P]),
    "zs_trainer_val_batches": (ctypes.c_int, [P]),
    "zs_trainer_total_steps": (I, [P]),
    "zs_model_config_from": (I, [S, ctypes.POINTER(ModelConfig), ctypes.POINTER(ModelConfig)]),
    "zs_trainer_init_from": (I, [P, S]),
    "zs_parse_bytes": (I, [S, ctypes.POINTER(ctypes.c_uint64)]),
    "zs_trainer_save": (I, [P, S, I]), "zs_trainer_resume": (I, [P, S]),
    "zs_trainer_steps_done": (I, [P]), "zs_trainer_rank": (I, [P]),
    "zs_trainer_world_size": (I, [P]), "zs_trainer_vocab": (I, [P]),
    "zs_trainer_gather_mem": (I, [P, ctypes.POINTER(MemStats)]),
    "zs_trainer_module": (P, [P]),
    "zs_comm_config_default": (CommConfig, []),
    "zs_comm_create": (I, [ctypes.POINTER(CommConfig), ctypes.POINTER(P)]),
    "zs_comm_destroy": (None, [P]), "zs_comm_rank": (I, [P]), "zs_comm_world_size": (I, [P]),
    "zs_tensor_spec_default": (TensorSpec, []),
    "zs_units_create": (I, [ctypes.POINTER(P)]), "zs_units_destroy": (None, [P]),
    "zs_units_add_unit": (I, [P, S, I]),
    "zs_units_add_tensor": (I, [P, ctypes.POINTER(TensorSpec)]),
    "zs_module_config_default": (ModuleConfig, []),
    "zs_module_create": (I, [P, P, ctypes.POINTER(ModuleConfig), ctypes.POINTER(P)]),
    "zs_module_destroy": (None, [P]), "zs_module_rank": (I, [P]),
    "zs_module_world_size": (I, [P]), "zs_module_num_units": (I, [P]),
    "zs_module_num_tensors": (I, [P]), "zs_module_unit_find": (I, [P, S]),
    "zs_module_tensor_at": (I, [P, I, ctypes.POINTER(TensorInfo)]),
    "zs_module_num_params": (ctypes.c_int64, [P]), "zs_module_num_padded": (ctypes.c_int64, [P]),
    "zs_module_forward_begin": (I, [P, I, ctypes.POINTER(c_float_p)]),
    "zs_module_forward_end": (I, [P, I]),
    "zs_module_backward_begin": (I, [P, I, ctypes.POINTER(c_float_p), ctypes.POINTER(c_float_p)]),
    "zs_module_backward_end": (I, [P, I]), "zs_module_zero_grad": (I, [P]),
    "zs_module_micro_begin": (I, [P, I, I]),
    "zs_adamw_config_default": (AdamwConfig, []),
    "zs_module_step": (I, [P, ctypes.POINTER(AdamwConfig), c_float_p]),
    "zs_module_step_ahead": (I, [P, ctypes.POINTER(AdamwConfig)]),
    "zs_module_steps_done": (I, [P]),
    "zs_module_allsum": (I, [P, ctypes.c_double, ctypes.POINTER(ctypes.c_double)]),
    "zs_module_param_hash": (I, [P, ctypes.POINTER(ctypes.c_uint64)]),
    "zs_module_get_param": (I, [P, S, c_float_p, ctypes.c_size_t]),
    "zs_module_set_param": (I, [P, S, c_float_p, ctypes.c_size_t]),
    "zs_module_gather_mem": (I, [P, ctypes.POINTER(MemStats)]),
    "zs_module_save": (I, [P, S, I]), "zs_module_resume": (I, [P, S]),
}


def _find():
    """The library to load and where it was found."""
    env = os.environ.get("ZSHARD_LIB")
    if env:
        if not os.path.isfile(env):
            raise ImportError(f"ZSHARD_LIB={env}: no such file (unset ZSHARD_LIB to use the "
                              f"library bundled with the package)")
        return env, "$ZSHARD_LIB"
    if os.path.isfile(BUNDLED_LIB):
        return BUNDLED_LIB, "bundled with the package"
    found = ctypes.util.find_library("zshard")
    if found:
        return found, "the system's library search"
    raise ImportError(
        f"libzshard not found: tried $ZSHARD_LIB (not set), the library bundled with the package "
        f"({BUNDLED_LIB}: absent, zshard was not built when the package was installed) and the "
        f"system's library search (ctypes.util.find_library('zshard'): nothing). Build zshard "
        f"(bash scripts/setup.sh, or cmake --build build), then `pip install ./python` again; "
        f"or set ZSHARD_LIB=/path/to/libzshard.so")


def _load():
    path, how = _find()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"libzshard {path} ({how}) does not load: {e}") from e
    for name, (res, args) in _SIGS.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    for cname, py in _STRUCTS.items():
        want = lib.zs_struct_size(cname.encode())
        if want != ctypes.sizeof(py):
            raise ImportError(f"{path}: struct {cname} is {want} bytes, the bindings expect "
                              f"{ctypes.sizeof(py)}: library and package versions differ")
    return lib, path, how


lib, lib_path, lib_source = _load()  # lib_source says which of the three places it came from


def executable():
    """Path of the `zshard` command-line tool (the launcher, `zshard run -n N -- python ...`):
    $ZSHARD_EXE, else the one bundled with the package, else `zshard` on PATH; None if none."""
    env = os.environ.get("ZSHARD_EXE")
    if env:
        return env
    if os.access(BUNDLED_EXE, os.X_OK):
        return BUNDLED_EXE
    return shutil.which("zshard")


def call(name, *args):
    """Call a zs_status function; raise ZshardError with zs_last_error() on failure."""
    st = getattr(lib, name)(*args)
    if st != 0:
        raise ZshardError(lib.zs_status_string(st).decode(), lib.zs_last_error().decode())


def enc(s):
    return None if s is None else str(s).encode()


def stage_of(stage):
    key = str(stage).lower()
    if key not in STAGES:
        raise ValueError(f"stage {stage!r} is not one of ddp, 1, 2, 3")
    return STAGES[key]


def dtype_of(dt):
    if str(dt).lower() not in DTYPES:
        raise ValueError(f"dtype {dt!r} is not fp32 or bf16")
    return DTYPES[str(dt).lower()]
