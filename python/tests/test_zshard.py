"""The Python package over libzshard: trainer, memory tables, the numpy sharding API, and a
2-rank ZeRO-3 run launched with `zshard run -n 2 -- python`."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import zshard

HERE = os.path.dirname(os.path.abspath(__file__))


def test_errors_are_exceptions_with_last_error():
    with pytest.raises(zshard.ZshardError) as e:
        zshard.Trainer("no-such-model", vocab=64)
    assert e.value.status == "ZS_ERR_INVALID"
    assert "no-such-model" in str(e.value)
    t = zshard.Trainer("gpt2-tiny", vocab=64, batch=2, seq=8)
    with pytest.raises(zshard.ZshardError, match="no data_path"):
        t.step()
    with pytest.raises(zshard.ZshardError, match="outside the vocabulary"):
        t.step(np.full((2, 8), 99), np.zeros((2, 8)))


def test_trainer_step_eval_generate_save_resume(tmp_path, corpus):
    kw = dict(data=corpus, batch=4, seq=32, steps=6, warmup=1, lr=3e-3)
    a = zshard.Trainer("gpt2-tiny", **kw)
    losses = [a.step()["loss"] for _ in range(3)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert np.isfinite(a.eval(n_batches=2))
    text = a.generate("the shard", max_tokens=8)
    assert isinstance(text, str) and 0 < len(text) <= 8  # 8 bytes, decoded as UTF-8
    a.save(str(tmp_path / "ck"))
    for _ in range(3):
        a.step()
    b = zshard.Trainer("gpt2-tiny", stage=3, **kw)
    b.resume(str(tmp_path / "ck"))
    assert b.steps_done == 3
    for _ in range(3):
        b.step()
    assert b.param_hash() == a.param_hash()  # ZeRO-3 continues the DDP run bitwise


def test_trainer_from_memory():
    rng = np.random.default_rng(3)
    tok = rng.integers(0, 64, size=(4, 16)).astype(np.int32)
    tgt = np.roll(tok, -1, axis=1)
    kw = dict(vocab=64, batch=4, seq=16, steps=10, warmup=0)
    a, b = zshard.Trainer("gpt2-tiny", **kw), zshard.Trainer("gpt2-tiny", stage=2, **kw)
    logits = a.logits(tok)
    assert logits.shape == (4, 16, 64) and logits.dtype == np.float32
    z = logits - logits.max(-1, keepdims=True)
    ce = -(z - np.log(np.exp(z).sum(-1, keepdims=True)))
    want = np.take_along_axis(ce, tgt[..., None], -1).mean()
    assert abs(a.eval(tok, tgt) - want) < 1e-4 * max(1.0, want)
    a.set_lr(5e-3)
    assert a.step(tok, tgt)["lr"] == pytest.approx(5e-3)
    b.set_lr(5e-3)
    b.step(tok, tgt)
    assert a.param_hash() == b.param_hash()
    w = a.get_param("ln_f.weight")
    assert w.shape == (a.get_param("ln_f.bias").size,)
    a.set_param("ln_f.bias", np.arange(w.size, dtype=np.float32))
    assert np.array_equal(a.get_param("ln_f.bias"), np.arange(w.size, dtype=np.float32))
    assert "wte.weight" in a.parameter_names()


def test_memory_estimate_and_compare(tmp_path):
    e = zshard.mem.estimate("gpt2-124m", world_size=4, stage=3, seq=1024)
    assert e["model_states"] == 16 * e["padded"] // 4
    rows = zshard.mem.compare("gpt2-124m", world_sizes=(1, 2, 4), seq=256)
    assert len(rows) == 12
    for r in rows:
        assert r["model_states"] == r["formula"], r
    z3 = [r["model_states"] for r in rows if r["stage"] == "3"]
    assert z3[0] > z3[1] > z3[2]
    # Hybrid sharding: model states of ZeRO at N = the shard group, its padding included.
    h = zshard.mem.estimate("gpt2-124m", world_size=4, stage=3, seq=1024, shard_group=2)
    assert h["model_states"] == 16 * h["padded"] // 2
    assert h["model_states"] == zshard.mem.estimate("gpt2-124m", world_size=2, stage=3,
                                                    seq=1024, batch=4)["model_states"]
    rows2, chart = zshard.mem.compare("gpt2-124m", world_sizes=(1, 2), seq=256,
                                      plot=str(tmp_path / "mem.png"))
    try:
        import matplotlib  # noqa: F401
        assert chart and os.path.getsize(chart) > 0
    except ImportError:
        assert chart is None


def test_memory_estimate_offload():
    # --offload optimizer on a GPU: no Adam state left on the device, and the host holds the
    # master (4 bytes), m and v (8) and the gradients' copy (4) of each element of the range.
    for stage, n in (("ddp", 1), ("3", 4)):
        e = zshard.mem.estimate("gpt2-124m", world_size=n, stage=stage, seq=256, device="cuda",
                                offload="optimizer")
        rng = e["padded"] if stage == "ddp" else e["padded"] // n
        assert e["optim_state"] == 0 and e["host_total"] == 16 * rng, e
        plain = zshard.mem.estimate("gpt2-124m", world_size=n, stage=stage, seq=256,
                                    device="cuda")
        assert plain["total"] - e["total"] == 8 * rng
    half = zshard.mem.estimate("gpt2-124m", world_size=2, stage=3, seq=256, device="cuda",
                               offload="optimizer", offload_fraction=0.5)
    assert 0 < half["host_total"] < 16 * half["padded"] // 2 and half["optim_state"] > 0
    with pytest.raises(zshard.ZshardError, match="on CPU ranks"):
        zshard.mem.estimate("gpt2-tiny", offload="optimizer")
    with pytest.raises(ValueError, match="offload"):
        zshard.mem.estimate("gpt2-tiny", device="cuda", offload="disk")
    # --offload params (ZeRO-3): the parameter shard leaves the GPU as well
    p = zshard.mem.estimate("gpt2-124m", world_size=4, stage=3, seq=256, device="cuda",
                            offload="params")
    o = zshard.mem.estimate("gpt2-124m", world_size=4, stage=3, seq=256, device="cuda",
                            offload="optimizer")
    assert p["param_shard"] == 0 and o["total"] - p["total"] == 4 * (p["padded"] // 4)
    with pytest.raises(zshard.ZshardError, match="use --stage 3"):
        zshard.mem.estimate("gpt2-tiny", stage=2, device="cuda", offload="params")


def test_module_numpy_fit():
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    units = zshard.Units().add_unit("lin").add_tensor("w", (1,), values=[0.5]).add_tensor(
        "b", (1,), init="zeros")
    m = zshard.Module(units, stage=3)
    assert m.get("w")[0] == np.float32(0.5)
    for _ in range(300):
        m.zero_grad()
        with m.backward("lin") as (p, g):
            err = p["w"][0] * x + p["b"][0] - (2 * x + 0.5)
            g["w"] += np.mean(err * x)
            g["b"] += np.mean(err)
        m.step(lr=0.05, weight_decay=0.0)
    assert abs(m.get("w")[0] - 2) < 0.01 and abs(m.get("b")[0] - 0.5) < 0.01
    m.set("w", [7.0])
    assert m.get("w")[0] == 7.0
    with m.forward(0) as p:
        assert p["w"][0] == 7.0 and not p["w"].flags.writeable


def _run2(zshard_exe, stage, tmp_path):
    out = subprocess.run([zshard_exe, "run", "-n", "2", "--", sys.executable,
                          os.path.join(HERE, "rank_script.py"), stage, str(tmp_path / stage)],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [ln.split("RESULT ", 1)[1] for ln in out.stdout.splitlines() if "RESULT " in ln]
    assert len(lines) == 1, out.stdout
    return json.loads(lines[0])


def test_two_ranks_zero3_from_python(zshard_exe, tmp_path):
    d, z3 = _run2(zshard_exe, "ddp", tmp_path), _run2(zshard_exe, "3", tmp_path)
    assert d["world"] == z3["world"] == 2
    assert z3["module_hash"] == d["module_hash"]  # stages agree bitwise
    assert z3["trainer_hash"] == d["trainer_hash"]
    assert z3["resumed_hash"] == z3["module_hash"]
    padded = z3["padded"]
    assert [r["model_states"] for r in z3["mem"]] == [16 * padded // 2] * 2
    assert [r["model_states"] for r in d["mem"]] == [16 * padded] * 2
