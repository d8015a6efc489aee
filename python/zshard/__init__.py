"""zshard for Python: a thin ctypes layer over libzshard's C ABI (include/zshard.h).

    import zshard
    t = zshard.Trainer("gpt2-tiny", data="corpus.txt", batch=8, seq=64, steps=100, stage=3)
    t.step(); t.eval(); t.generate("Hello"); t.save("ckpt"); t.resume("ckpt")
    zshard.mem.estimate("gpt2-124m", world_size=4, stage=3); zshard.mem.compare("gpt2-124m")
    units = zshard.Units().add_unit("layer").add_tensor("w", (4, 4), init="normal")
    m = zshard.Module(units, comm=zshard.Comm(), stage=3)

Several ranks: `zshard run -n 2 -- python script.py` (zshard.executable() is the `zshard` the
package bundles). Errors raise zshard.ZshardError carrying zs_last_error(). The library is the
one bundled by `pip install ./python`, unless $ZSHARD_LIB names another. See docs/embedding.md."""
from . import mem
from ._lib import ZshardError, executable
from .module import Comm, Module, Units
from .trainer import Trainer

__version__ = "0.1.0"
__all__ = ["Trainer", "Module", "Units", "Comm", "ZshardError", "mem", "executable"]
