"""The Python API says what the CLI says: the same names and defaults give the same numbers
(Trainer.eval as `zshard eval`, Trainer.generate as `zshard generate`, zshard.mem.estimate as
`zshard mem`), init_from= as `train --init-from`, and a run stops at its steps."""
import json
import subprocess

import numpy as np
import pytest

import zshard


def _cli(exe, *args, cwd=None):
    out = subprocess.run([exe, *map(str, args)], capture_output=True, timeout=240, cwd=cwd)
    assert out.returncode == 0, (args, out.stdout.decode(errors="replace"),
                                 out.stderr.decode(errors="replace"))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory, corpus):
    """A 4-step gpt2-tiny run (batch 4, seq 32) and its checkpoint."""
    d = tmp_path_factory.mktemp("parity")
    t = zshard.Trainer("gpt2-tiny", data=corpus, batch=4, seq=32, steps=4, warmup=1, lr=3e-3)
    for _ in range(4):
        t.step()
    t.save(str(d / "ck"))
    return t, d / "ck"


def test_step_past_steps_raises(corpus):
    t = zshard.Trainer("gpt2-tiny", data=corpus, batch=2, seq=16, steps=2)
    t.step()
    t.step()
    h = t.param_hash()
    with pytest.raises(zshard.ZshardError, match=r"step 3: .*steps=2") as e:
        t.step()
    assert e.value.status == "ZS_ERR_INVALID"
    with pytest.raises(zshard.ZshardError, match="steps=2"):  # from memory too
        t.step(np.zeros((2, 16)), np.zeros((2, 16)))
    assert t.steps_done == 2 and t.param_hash() == h  # nothing trained


def test_eval_defaults_give_zshard_eval(run, corpus, zshard_exe):
    t, ck = run
    loss = t.eval()
    assert loss == t.eval(n_batches=8) and loss != t.eval(n_batches=1)
    cli = json.loads(_cli(zshard_exe, "eval", ck, "--data", corpus, "--json").stdout)
    assert cli["batches"] == 8 and (cli["batch"], cli["seq"]) == (4, 32)
    assert np.float32(cli["loss"]) == np.float32(loss)  # the same batches, the same bits
    cli = json.loads(_cli(zshard_exe, "eval", ck, "--data", corpus, "--batches", "all",
                          "--json").stdout)
    assert np.float32(cli["loss"]) == np.float32(t.eval(n_batches="all"))
    for bad in (0, -1, "some"):
        with pytest.raises(ValueError, match="n_batches"):
            t.eval(n_batches=bad)


def test_generate_defaults_give_zshard_generate(run, corpus, zshard_exe):
    _, ck = run
    g = zshard.Trainer(init_from=str(ck), data=corpus, seq=256)  # the CLI's window: max_seq
    out = _cli(zshard_exe, "generate", ck, "--prompt", "the ")
    assert b"200 tokens" in out.stderr
    want = out.stdout[len(b"the "):-1].decode("utf-8", errors="replace")
    text = g.generate("the ")  # max_tokens 200, temperature 0.8, seed 1337, as the CLI
    assert text == want
    assert g.generate("the ", temperature=0) != text  # the default is not greedy
    out = _cli(zshard_exe, "generate", ck, "--prompt", "the ", "--max-tokens", 30,
               "--temperature", 0.5, "--top-k", 5, "--seed", 7)
    assert g.generate("the ", max_tokens=30, temperature=0.5, top_k=5, seed=7) == \
        out.stdout[4:-1].decode("utf-8", errors="replace")
    with pytest.warns(DeprecationWarning, match="max_tokens"):
        old = g.generate("the ", n_tokens=7)
    assert old == g.generate("the ", max_tokens=7) and len(old) > 0
    with pytest.raises(TypeError, match="max_tokens only"):
        g.generate("the ", max_tokens=5, n_tokens=7)
    with pytest.raises(ValueError, match="prompt is empty"):
        g.generate("")
    assert g.generate("the ", max_tokens=0) == ""


def test_generate_token_model_takes_and_gives_ids():
    t = zshard.Trainer("gpt2-tiny", vocab=64, batch=2, seq=16)
    ids = t.generate([1, 2, 3], max_tokens=5)
    assert len(ids) == 5 and all(isinstance(i, int) and 0 <= i < 64 for i in ids)
    assert t.generate(max_tokens=4) == t.generate([0], max_tokens=4)  # no EOS: starts at 0
    with pytest.raises(ValueError, match="token ids"):
        t.generate("text")


def test_init_from_takes_the_sources_model_and_weights(run, corpus, zshard_exe, tmp_path):
    t, ck = run
    u = zshard.Trainer(init_from=str(ck), data=corpus, batch=4, seq=32, steps=3)
    assert u.steps_done == 0 and u.model["n_layer"] == 2  # weights only, step 0
    assert u.param_hash() == t.param_hash()
    u.step()  # a fresh run of its own schedule
    _cli(zshard_exe, "ckpt", "export", ck, "--format", "hf", tmp_path / "hf")
    h = zshard.Trainer(init_from=str(tmp_path / "hf"), data=corpus, batch=4, seq=32)
    assert h.param_hash() == t.param_hash()
    w = zshard.Trainer("gpt2-tiny", data=corpus, batch=4, seq=32)
    w.init_from(str(ck))
    assert w.param_hash() == t.param_hash()
    assert zshard.Trainer("gpt2-tiny", init_from=str(ck), data=corpus).param_hash() == \
        t.param_hash()  # a model that agrees is fine
    with pytest.raises(ValueError, match=r"'gpt2-mini' contradicts .*n_layer is 2 there, 4"):
        zshard.Trainer("gpt2-mini", init_from=str(ck), data=corpus)
    with pytest.raises(zshard.ZshardError, match="no-such-dir"):
        zshard.Trainer(init_from=str(tmp_path / "no-such-dir"), data=corpus)


def test_trainer_settings_as_train_flags(corpus):
    kw = dict(data=corpus, batch=4, seq=32, steps=2)
    bf = zshard.Trainer("gpt2-tiny", dtype="bf16", **kw).memory()[0]
    mixed = zshard.Trainer("gpt2-tiny", dtype="bf16", reduce_dtype="fp32", **kw).memory()[0]
    assert 0 < bf["grad"] < mixed["grad"]  # bf16 gradients: --reduce-dtype defaults to --dtype
    a = zshard.Trainer("gpt2-tiny", **kw)
    b = zshard.Trainer("gpt2-tiny", recompute="block", attention="flash", device="cpu",
                       device_mem="1G", **kw)
    assert a.step()["loss"] == b.step()["loss"]  # recompute is bitwise the same step
    assert a.param_hash() == b.param_hash()
    with pytest.raises(ValueError, match="recompute 'sometimes' is not one of none, block"):
        zshard.Trainer("gpt2-tiny", recompute="sometimes", **kw)
    with pytest.raises(zshard.ZshardError):
        zshard.Trainer("gpt2-tiny", device_mem="4Q", **kw)
    with pytest.raises(zshard.ZshardError, match="over --device-mem 64.00 KiB"):
        zshard.Trainer("gpt2-tiny", device_mem="64K", **kw)
    del a, b  # the cap is the process's while a trainer lives, and leaves with it
    assert zshard.Trainer("gpt2-tiny", **kw).step()["step"] == 1


def _mem_table(text):
    """{category: GiB string} of the one stage column `zshard mem` prints."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] in zshard._lib.MEM_CATEGORIES:
            rows[cells[0]] = cells[1]
    return rows


@pytest.mark.parametrize("args,kw", [
    ((), {}),
    (("--model", "llama-tiny", "--nproc", "2", "--stage", "3"),
     dict(model="llama-tiny", world_size=2, stage=3)),
    (("--nproc", "3", "--dtype", "bf16", "--recompute", "block"),
     dict(world_size=3, dtype="bf16", recompute="block")),
])
def test_mem_estimate_defaults_give_zshard_mem(zshard_exe, args, kw):
    table = _mem_table(_cli(zshard_exe, "mem", *args).stdout.decode())
    assert set(table) == set(zshard._lib.MEM_CATEGORIES)
    e = zshard.mem.estimate(**kw)
    assert {c: f"{e[c] / 2**30:.3f}" for c in table} == table
    assert e["model_states"] > 0 and e["activation"] > 0


def test_docs_as_train_flags(tmp_path, zshard_exe):
    """docs=, doc_sep=, epochs= as `zshard train --docs --doc-sep --epochs`: the same steps,
    losses and weights; the step reports the real targets its loss averages."""
    docs = "".join(f"{' '.join(['tide', 'shard', 'rank'][: 1 + i % 3] * (1 + i % 7))}.\n%\n"
                   for i in range(80))
    p = tmp_path / "docs.txt"
    p.write_text(docs)
    kw = dict(data=str(p), docs="pad", doc_sep="%", batch=4, seq=16, epochs=1, steps=3)
    t = zshard.Trainer("gpt2-tiny", **kw)
    assert t.steps == 3  # --steps caps --epochs
    stats = [t.step() for _ in range(3)]
    assert all(0 < s["targets"] < 4 * 16 for s in stats)  # padding is not a target
    log = tmp_path / "run.jsonl"
    _cli(zshard_exe, "train", "--data", p, "--docs", "pad", "--doc-sep", "%", "--batch", 4,
         "--seq", 16, "--epochs", 1, "--steps", 3, "--sample-len", 0, "--quiet", "--log", log)
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [r for r in recs if "step" in r and "loss" in r]
    assert [np.float32(r["loss"]) for r in steps] == [np.float32(s["loss"]) for s in stats]
    assert [r["targets"] for r in steps] == [s["targets"] for s in stats]
    final = [r for r in recs if r.get("final")][0]
    assert final["param_hash"] == t.param_hash()
    with pytest.raises(ValueError, match="docs 'packed' is not one of"):
        zshard.Trainer("gpt2-tiny", data=str(p), docs="packed")
    with pytest.raises(zshard.ZshardError, match="--doc-sep LINE"):
        zshard.Trainer("gpt2-tiny", data=str(p), docs="pack")
