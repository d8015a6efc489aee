#!/usr/bin/env python3
"""Writes examples/tokenizer/fortunes-bpe-4k/: a GPT-2-style tokenizer (ByteLevel BPE, 4096 ids,
<|endoftext|> last) trained with Hugging Face `tokenizers` on the fortune files of
tests/hf_tok_families.py, so that the README's `zshard tokenize` example runs offline. The
output is committed; run this (with build/pyvenv's python) only to remake it."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import hf_tok_families as F  # noqa: E402
import tempfile  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    docs = [t for _, ds in F.write_corpus(tmp) for t in ds]
tok = F.gpt2_style(docs, vocab_size=4095)
F.save(tok, "gpt2", os.path.join(HERE, "fortunes-bpe-4k"))
# save() also writes the vocab.json + merges.txt form next to it; the example keeps one form.
import shutil  # noqa: E402
shutil.rmtree(os.path.join(HERE, "fortunes-bpe-4k-files"))
# One line instead of the library's indented form: a third of the size, the same file to read.
import json  # noqa: E402
p = os.path.join(HERE, "fortunes-bpe-4k", "tokenizer.json")
d = json.load(open(p, encoding="utf-8"))
with open(p, "w", encoding="utf-8") as f:
    json.dump(d, f, ensure_ascii=False, separators=(",", ":"))
    f.write("\n")
print("fortunes-bpe-4k: %d ids" % tok.get_vocab_size())
