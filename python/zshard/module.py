"""The sharding API for your own model (include/zshard/module.h) with numpy: declare Units of
named tensors, shard them in a Module over a Comm, and compute forward and backward in numpy
between begin/end. forward(u) yields {name: read-only float32 view}; backward(u) yields
(params, grads) with writable gradient views: ADD into them (g[...] += ...). The views are
valid only inside the with-block. Every call is collective across ranks."""
import contextlib
import ctypes

import numpy as np

from ._lib import (MEM_CATEGORIES, AdamwConfig, MemStats, TensorInfo, TensorSpec, call,
                   dtype_of, enc, lib, stage_of)

_INIT = {"zeros": 0, "ones": 1, "normal": 2, "values": 3}


class Comm:
    """The job's communicator, joined from the environment that `zshard run -n N`, torchrun,
    srun or mpirun set (a world of one without one). Create one per process, first."""

    def __init__(self):
        cfg = lib.zs_comm_config_default()
        self._c = ctypes.c_void_p()
        call("zs_comm_create", ctypes.byref(cfg), ctypes.byref(self._c))

    rank = property(lambda self: lib.zs_comm_rank(self._c))
    world_size = property(lambda self: lib.zs_comm_world_size(self._c))

    def close(self):
        if getattr(self, "_c", None):
            lib.zs_comm_destroy(self._c)
            self._c = None


class Units:
    """Declarations: add_unit(name), then add_tensor(name, shape, ...) for the last unit."""

    def __init__(self):
        self._u = ctypes.c_void_p()
        call("zs_units_create", ctypes.byref(self._u))

    def __del__(self):
        if getattr(self, "_u", None):
            lib.zs_units_destroy(self._u)
            self._u = None

    def add_unit(self, name, n_uses=1):
        call("zs_units_add_unit", self._u, enc(name), n_uses)
        return self

    def add_tensor(self, name, shape, decay=False, init="zeros", std=0.02, values=None):
        """init: "zeros", "ones", "normal" (std), or values= an array of that shape (copied)."""
        shape = tuple(int(d) for d in shape)
        if not 1 <= len(shape) <= 4:
            raise ValueError(f"tensor {name}: 1 to 4 dimensions")
        t = lib.zs_tensor_spec_default()
        t.name, t.ndim, t.decay, t.init_std = enc(name), len(shape), int(bool(decay)), std
        for i, d in enumerate(shape):
            t.shape[i] = d
        keep = None
        if values is not None:
            keep = np.ascontiguousarray(values, dtype=np.float32).reshape(shape)
            t.init, t.values = _INIT["values"], keep.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        else:
            t.init = _INIT[init]
        call("zs_units_add_tensor", self._u, ctypes.byref(t))
        return self


class Module:
    """Module(units, comm=None, stage="ddp", prefetch=1, param_dtype="fp32", grad_dtype="fp32",
    seed=1337, name="module"): the sharded parameters (collective to create)."""

    def __init__(self, units, comm=None, stage="ddp", prefetch=1, param_dtype="fp32",
                 grad_dtype="fp32", seed=1337, name="module"):
        cfg = lib.zs_module_config_default()
        cfg.stage, cfg.prefetch, cfg.seed = stage_of(stage), prefetch, seed
        cfg.param_dtype, cfg.grad_dtype = dtype_of(param_dtype), dtype_of(grad_dtype)
        self._name = enc(name)
        cfg.name = self._name
        self._m = ctypes.c_void_p()
        self._owned = True
        self.comm = comm
        call("zs_module_create", units._u, comm._c if comm else None, ctypes.byref(cfg),
             ctypes.byref(self._m))
        self._index()

    @classmethod
    def _wrap(cls, ptr):
        self = cls.__new__(cls)
        self._m, self._owned, self.comm = ctypes.c_void_p(ptr), False, None
        self._index()
        return self

    def _index(self):
        self.tensors = {}  # name -> (unit, offset, shape)
        for i in range(lib.zs_module_num_tensors(self._m)):
            ti = TensorInfo()
            call("zs_module_tensor_at", self._m, i, ctypes.byref(ti))
            shape = tuple(ti.shape[d] for d in range(ti.ndim))
            self.tensors[ti.name.decode()] = (ti.unit, ti.offset, shape)
        self.units = [[n for n, t in self.tensors.items() if t[0] == u]
                      for u in range(lib.zs_module_num_units(self._m))]

    def close(self):
        if getattr(self, "_owned", False) and self._m:
            lib.zs_module_destroy(self._m)
            self._m = None

    __del__ = close

    rank = property(lambda self: lib.zs_module_rank(self._m))
    world_size = property(lambda self: lib.zs_module_world_size(self._m))
    num_params = property(lambda self: lib.zs_module_num_params(self._m))
    num_padded = property(lambda self: lib.zs_module_num_padded(self._m))
    steps_done = property(lambda self: lib.zs_module_steps_done(self._m))

    def unit(self, name):
        u = lib.zs_module_unit_find(self._m, enc(name))
        if u < 0:
            raise KeyError(name)
        return u

    def _views(self, u, ptr, writable):
        out = {}
        for n in self.units[u]:
            _, off, shape = self.tensors[n]
            count = int(np.prod(shape))
            buf = (ctypes.c_float * count).from_address(ctypes.addressof(ptr.contents) + 4 * off)
            a = np.ctypeslib.as_array(buf).reshape(shape)
            a.flags.writeable = writable
            out[n] = a
        return out

    @contextlib.contextmanager
    def forward(self, unit):
        """with m.forward(u) as p: p[name] is a read-only float32 view of the full tensor."""
        u = unit if isinstance(unit, int) else self.unit(unit)
        p = ctypes.POINTER(ctypes.c_float)()
        call("zs_module_forward_begin", self._m, u, ctypes.byref(p))
        try:
            yield self._views(u, p, False)
        finally:
            call("zs_module_forward_end", self._m, u)

    @contextlib.contextmanager
    def backward(self, unit):
        """with m.backward(u) as (p, g): add this micro-batch's gradients into g[name]."""
        u = unit if isinstance(unit, int) else self.unit(unit)
        p, g = ctypes.POINTER(ctypes.c_float)(), ctypes.POINTER(ctypes.c_float)()
        call("zs_module_backward_begin", self._m, u, ctypes.byref(p), ctypes.byref(g))
        try:
            yield self._views(u, p, False), self._views(u, g, True)
        finally:
            call("zs_module_backward_end", self._m, u)

    def zero_grad(self):
        call("zs_module_zero_grad", self._m)

    def micro_begin(self, k, n):
        call("zs_module_micro_begin", self._m, k, n)

    def step(self, lr, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0):
        """AdamW with the caller's lr; returns the global gradient norm before clipping."""
        h = AdamwConfig(lr, beta1, beta2, eps, weight_decay, grad_clip)
        norm = ctypes.c_float()
        call("zs_module_step", self._m, ctypes.byref(h), ctypes.byref(norm))
        return norm.value

    def step_ahead(self, lr, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0):
        """The coming step's settings before its backward (after zero_grad): offloaded and
        without a clip, each unit is stepped on the host as its gradients come down; step()
        must follow with the same settings. Otherwise it does nothing."""
        h = AdamwConfig(lr, beta1, beta2, eps, weight_decay, grad_clip)
        call("zs_module_step_ahead", self._m, ctypes.byref(h))

    def allsum(self, x):
        """Sum of one float per rank in rank order (the same bits everywhere)."""
        out = ctypes.c_double()
        call("zs_module_allsum", self._m, float(x), ctypes.byref(out))
        return out.value

    def param_hash(self):
        h = ctypes.c_uint64()
        call("zs_module_param_hash", self._m, ctypes.byref(h))
        return f"{h.value:016x}"

    def get(self, name):
        """Full fp32 master values of a tensor (collective), as a new array of its shape."""
        shape = self.tensors[name][2]
        out = np.empty(shape, dtype=np.float32)
        call("zs_module_get_param", self._m, enc(name),
             out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.size)
        return out

    def set(self, name, values):
        """Replace a tensor's master weights with rank 0's values (collective)."""
        a = np.ascontiguousarray(values, dtype=np.float32).reshape(self.tensors[name][2])
        call("zs_module_set_param", self._m, enc(name),
             a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), a.size)

    def memory(self):
        """Per-rank memory (collective): list of dicts of current and peak bytes by category,
        plus "model_states" (the peak of param..optim_state)."""
        stats = (MemStats * self.world_size)()
        call("zs_module_gather_mem", self._m, stats)
        return _mem_rows(stats)

    def save(self, save_dir, keep=0):
        call("zs_module_save", self._m, enc(save_dir), keep)

    def resume(self, path):
        call("zs_module_resume", self._m, enc(path))


def _mem_rows(stats):
    rows = []
    for s in stats:
        r = {c: int(s.current[i]) for i, c in enumerate(MEM_CATEGORIES)}
        r.update({"peak_" + c: int(s.peak[i]) for i, c in enumerate(MEM_CATEGORIES)})
        r["model_states"] = sum(int(s.peak[i]) for i in range(5))
        r["total_peak"] = int(s.total_peak)
        rows.append(r)
    return rows
