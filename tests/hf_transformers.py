"""The exported Hugging Face directory loads in transformers and gives zshard's loss.

For GPT-2 and LLaMA: build an HF-layout directory (real HF names, config.json) from a short
zshard run, fine-tune it with --init-from on 2 ranks with ZeRO-3, evaluate with `zshard
eval`, export with --format hf, load with AutoModelForCausalLM.from_pretrained and compare
the loss on the same tokens within 1e-5 relative. Exits 77 (skip) without transformers/torch.
"""
import json, os, subprocess, sys, tempfile

try:
    import torch, transformers  # noqa: F401
except Exception:
    print("skip: transformers and torch are not importable")
    sys.exit(77)

Z = os.path.join(os.environ.get("ZS_BUILD_DIR", "build"), "zshard")
work = tempfile.mkdtemp(prefix="zshard-test-hf-")
words = ["the cat ", "sat on ", "a mat ", "and the dog ", "ran far ", "away. "]
with open(os.path.join(work, "corpus.txt"), "w") as f:
    f.write("".join(words[(i * 7 + i // 5) % 6] for i in range(3000)))


def sh(*args):
    r = subprocess.run([Z, *args], cwd=work, capture_output=True, text=True, errors="replace")
    if r.returncode:
        sys.exit("FAIL: %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
    return r.stdout


T = 32
fails = 0
for model in ["gpt2-tiny", "llama-tiny"]:
    sh("train", "--model", model, "--data", "corpus.txt", "--steps", "5", "--seq", str(T),
       "--quiet", "--save-dir", "pre-" + model, "--sample-len", "0")
    sh("ckpt", "export", "pre-" + model, "--format", "hf", "src-" + model)
    sh("train", "--data", "corpus.txt", "--init-from", "src-" + model, "--nproc", "2",
       "--stage", "3", "--steps", "5", "--seq", str(T), "--quiet", "--save-dir", "ft-" + model,
       "--sample-len", "0")
    out = sh("eval", "ft-" + model, "--data", "corpus.txt", "--split", "all", "--batch", "1",
             "--seq", str(T), "--batches", "1", "--json")
    zloss = json.loads(out[out.index("{"):])["loss"]
    sh("generate", "ft-" + model, "--prompt", "the ", "--max-tokens", "20")
    sh("ckpt", "export", "ft-" + model, "--format", "hf", "hf-" + model)
    m = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(work, "hf-" + model))
    m.eval()
    data = open(os.path.join(work, "corpus.txt"), "rb").read()[: T + 1]
    ids = torch.tensor([list(data)], dtype=torch.long)
    with torch.no_grad():
        hloss = m(ids[:, :T], labels=None).logits.float()
        hloss = torch.nn.functional.cross_entropy(hloss[0], ids[0, 1:]).item()
    rel = abs(hloss - zloss) / abs(zloss)
    print("%s: zshard eval %.9g, transformers %.9g, relative difference %.3g"
          % (model, zloss, hloss, rel))
    if rel > 1e-5:
        fails += 1
sys.exit(1 if fails else 0)
