"""Shared by tests/test_hf_parity.py and bench/tokenize_bench.py: real multilingual documents
from Debian's fortune packages, read by zshard tokenize's rules, and three tokenizer.json files
trained on them with the Hugging Face `tokenizers` library in the configurations of GPT-2,
Meta-Llama-3-8B and Llama-2-7b-hf (normalizer, pre-tokenizer, model flags, post-processor and
decoder as those files have them; only the vocabulary and merges are ours)."""
import glob
import json
import os

# Fortune files of each language that Debian 12 ships (fortunes, fortunes-de, -ru, -zh, -es,
# -it, -pl, -cs, -bg): a few files each, so that the corpus is about 2-3 MB of real text.
FORTUNE_DIR = "/usr/share/games/fortunes"
LANGS = {
    "en": ["fortunes", "literature", "science", "wisdom"],
    "de": ["de/zitate", "de/sprueche", "de/wusstensie"],
    "ru": ["ru/love", "ru/knowledge", "ru/life"],
    "zh": ["tang300", "song100", "chinese"],
    "es": ["es/refranes.fortunes", "es/sabiduria.fortunes", "es/arte.fortunes"],
    "it": ["it/italia", "it/norm"],
    "pl": ["pl/dowcipy", "pl/argante"],
    "cs": ["cs/klasik-cz", "cs/citace"],
    "bg": ["bg/bgauthors", "bg/intproverb"],
}
MAX_FILE_BYTES = 400_000  # the Chinese collection alone is 2 MB; take its first documents

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Edge cases real text can hold, written to a file of their own: invalid UTF-8, CRLF lines,
# special tokens' text, contractions in both cases (and long s), scripts with combining marks,
# Unicode spaces and digits, emoji.
EDGE_DOCS = [
    b"Invalid bytes: \xff\xfe, a cut \xe4\xb8 char, an overlong \xc0\xaf, a surrogate \xed\xa0\x80.",
    b"CRLF line one\r\nline two\r\n",
    b"Specials in text: <|endoftext|> <s> </s> <|begin_of_text|> <unk> <0x41>",
    b"I'M HE'S We'LL they'VE it'D you'RE don'T \xc5\xbf'\xc5\xbf 'S",
    "हिन्दी में लिखा गया वाक्य। ภาษาไทย สวัสดีครับ עִבְרִית מְנֻקֶּדֶת العَرَبِيَّة".encode(),
    "Spaces:\u00a0nbsp\u3000ideographic\u2003em\u2009thin\u000b\u000cvt ff \t\ttabs   end   ".encode(),
    "Digits: ١٢٣٤ ५६७ ½ ⅔ Ⅻ ① ²³ 12345678 x²".encode(),
    "Emoji 👋🏽 👩‍👩‍👧 🇩🇪 and CJK 漢字かなカナ한국어 ＦＵＬＬＷＩＤＴＨ".encode(),
    b"   leading spaces and a trailing newline\n\n\n",
    b"\n\nnewlines\n \n  \n\tfirst",
]


def fortune_files():
    """The fortune files present here, as (language, path)."""
    out = []
    for lang, names in LANGS.items():
        for n in names:
            p = os.path.join(FORTUNE_DIR, n)
            if os.path.isfile(p):
                out.append((lang, p))
    return out


def split_docs(data, sep=b"%"):
    """zshard tokenize's --doc-sep rule on bytes: a line equal to sep (a trailing CR aside) ends a
    document; a document is its lines joined by LF without the last line break (and a CR
    before it); a NUL in the first 8 KiB makes the file binary (no documents)."""
    if b"\0" in data[:8192]:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    docs, cur, have = [], [], False
    for ln in lines:
        if (ln[:-1] if ln.endswith(b"\r") else ln) == sep:
            docs.append(cur)
            cur, have = [], False
        else:
            cur.append(ln)
            have = True
    if have:
        docs.append(cur)
    out = []
    for d in docs:
        b = b"\n".join(d)
        if b.endswith(b"\r"):
            b = b[:-1]
        out.append(b)
    return out


def keep(text):
    """Not an empty document (zshard skips those: no text, or only ASCII white space)."""
    return text.strip(" \t\r\n\v\f") != ""


def write_corpus(dirname):
    """Copies the fortune files (each cut at MAX_FILE_BYTES, on a separator line) and the edge
    cases into dirname; returns [(path, [document text, ...])] with the documents zshard keeps,
    decoded as zshard reads them (invalid UTF-8 -> U+FFFD, Python's errors='replace')."""
    os.makedirs(dirname, exist_ok=True)
    files = []
    for i, (lang, src) in enumerate(fortune_files()):
        data = open(src, "rb").read()
        if len(data) > MAX_FILE_BYTES:
            cut = data.rfind(b"\n%\n", 0, MAX_FILE_BYTES)
            data = data[:cut + 3] if cut > 0 else data[:MAX_FILE_BYTES]
        p = os.path.join(dirname, "%02d_%s_%s.txt" % (i, lang, os.path.basename(src)))
        open(p, "wb").write(data)
        files.append(p)
    p = os.path.join(dirname, "99_edge_cases.txt")
    open(p, "wb").write(b"\n%\n".join(EDGE_DOCS) + b"\n%\n")
    files.append(p)
    out = []
    for p in files:
        docs = [d.decode("utf-8", errors="replace") for d in split_docs(open(p, "rb").read())]
        out.append((p, [d for d in docs if keep(d)]))
    return out


def _train(tok, docs, trainer):
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


def gpt2_style(docs, vocab_size=8000):
    """GPT-2: no normalizer, ByteLevel pre-tokenizer (its own regex), BPE without unk or byte
    fallback, ByteLevel post-processor and decoder, <|endoftext|> the last id."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                 use_regex=True)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    _train(tok, docs, tr)
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


def llama3_style(docs, vocab_size=8000):
    """Meta-Llama-3-8B: Split on its regex then ByteLevel without regex, BPE with
    ignore_merges, the post-processor Sequence[ByteLevel, Template '<|begin_of_text|> $A'],
    256 special tokens after the vocabulary (<|begin_of_text|>, <|end_of_text|>, reserved)."""
    from tokenizers import (Regex, Tokenizer, decoders, models, pre_tokenizers, processors,
                            trainers)
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    _train(tok, docs, tr)
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + \
        ["<|reserved_special_token_%d|>" % i for i in range(4)] + \
        ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>",
         "<|eot_id|>"] + ["<|reserved_special_token_%d|>" % i for i in range(5, 251)]
    tok.add_special_tokens(specials)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def llama2_style(docs, vocab_size=8000):
    """Llama-2-7b-hf: normalizer Sequence[Prepend '▁', Replace ' ' -> '▁'], no pre-tokenizer,
    BPE with unk <unk>, fuse_unk, byte_fallback (<0x00>..<0xFF> at ids 3..258), template
    '<s> $A', decoder Sequence[Replace '▁' -> ' ', ByteFallback, Fuse, Strip 1 leading space].
    Trained (as SentencePiece does) on words split at '▁', with a limited alphabet so that rare
    chars take the byte fallback."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                               split=True)
    tr = trainers.BpeTrainer(vocab_size=vocab_size - 259, show_progress=False,
                             limit_alphabet=400)
    _train(t, docs, tr)
    trained = json.loads(t.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for tokstr, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if tokstr not in vocab:
            vocab[tokstr] = len(vocab)
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    d = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": trained["merges"]},
    }
    return Tokenizer.from_str(json.dumps(d))


FAMILIES = {"gpt2": gpt2_style, "llama3": llama3_style, "llama2": llama2_style}
EOS = {"gpt2": "<|endoftext|>", "llama3": "<|end_of_text|>", "llama2": "</s>"}


def save(tok, family, dirname):
    """tokenizer.json (+ tokenizer_config.json naming the EOS, as the model repos have) in
    dirname; for gpt2 also a vocab.json + merges.txt folder dirname + '-files'."""
    os.makedirs(dirname, exist_ok=True)
    tok.save(os.path.join(dirname, "tokenizer.json"))
    json.dump({"eos_token": EOS[family]}, open(os.path.join(dirname, "tokenizer_config.json"),
                                                  "w"))
    if family == "gpt2":
        files = dirname + "-files"
        os.makedirs(files, exist_ok=True)
        model = json.loads(tok.to_str())["model"]
        vocab = dict(model["vocab"])
        vocab["<|endoftext|>"] = tok.token_to_id("<|endoftext|>")
        json.dump(vocab, open(os.path.join(files, "vocab.json"), "w"), ensure_ascii=False)
        with open(os.path.join(files, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n")
            for m in model["merges"]:
                f.write((m if isinstance(m, str) else " ".join(m)) + "\n")


def read_shards(out_dir, split="train"):
    """All tokens of a split's shards, in order (llm.c format, 16 or 32 bit)."""
    import struct
    toks = []
    for p in sorted(glob.glob(os.path.join(out_dir, split + "_*.bin"))):
        data = open(p, "rb").read()
        magic, version, n = struct.unpack("<3i", data[:12])
        width = 2 if magic == 20240520 else 4
        body = data[1024:1024 + n * width]
        toks.extend(struct.unpack("<%d%s" % (n, "H" if width == 2 else "I"), body))
    return toks
