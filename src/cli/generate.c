/* `zshard generate SRC`: text from a byte-level model, token ids from a token model, or text
 * through a Hugging Face tokenizer (--tokenizer), with temperature, top-k, top-p, a seed, a
 * token budget and a stop token. Any weights source; any world size and stage (each new token
 * is a forward every rank takes part in). */
#include "cli/cli.h"
#include "args/flags.h"
#include "cli/train_ops.h"
#include "core/status.h"
#include "data/tokenizer.h"
#include "zshard.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int parse_ids(const char *s, int32_t **out, int *n) {
    int cap = 16;
    *n = 0;
    *out = malloc((size_t)cap * sizeof **out);
    while (*out && *s) {
        char *end;
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s) break;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > (1 << 30)) return -1;
        if (*n == cap) {
            cap *= 2;
            int32_t *g = realloc(*out, (size_t)cap * sizeof *g);
            if (!g) return -1;
            *out = g;
        }
        (*out)[(*n)++] = (int32_t)v;
        s = end;
    }
    return *out ? 0 : -1;
}

/* What generate reads from the command line. */
typedef struct gen_opts {
    zs_train_config cfg;
    zs_gen_config g;
    const char *src, *model, *prompt, *ids, *tok_path, *config_path;
    int nproc, seq, eos_set;
} gen_opts;

/* SRC: the one word that is no flag. */
static int gen_src(void *opts, const char *a) {
    gen_opts *o = opts;
    if (o->src) return zs_cli_fail(2, "generate: unexpected argument '%s'", a);
    o->src = a;
    return 0;
}

#define GO(field) offsetof(gen_opts, field)
static const zs_flag GEN_FLAGS[] = {
    ZS_FLAG_CONFIG_ROW(GO(config_path)),
    {.name = "prompt", .kind = ZS_FLAG_STR, .off = GO(prompt), .arg = "TEXT",
     .help = "the text to continue: byte-level models, or any model\n"
             "with --tokenizer [newline; with a tokenizer, its BOS\n"
             "template or else its EOS token]"},
    {.name = "prompt-ids", .kind = ZS_FLAG_STR, .off = GO(ids), .arg = "IDS",
     .help = "token models: token ids, space separated [the EOS token]"},
    {.name = "tokenizer", .kind = ZS_FLAG_STR, .off = GO(tok_path), .arg = "PATH",
     .help = "a Hugging Face tokenizer: a directory with tokenizer.json\n"
             "or vocab.json + merges.txt, or one of those files. The\n"
             "prompt is encoded with it (its template, e.g. LLaMA's\n"
             "<s>, applied), the output decoded (special tokens left\n"
             "out), and its EOS token is the default --eos. BPE only\n"
             "(GPT-2, Llama-2/3 style); see docs/tokenizer.md"},
    {.name = "max-tokens", .kind = ZS_FLAG_INT, .off = GO(g.max_tokens), .lo = 0, .hi = 1 << 20,
     .arg = "N", .help = "new tokens at most [200]"},
    {.name = "temperature", .kind = ZS_FLAG_FLOAT, .off = GO(g.temperature), .arg = "F",
     .help = "0 = greedy (argmax) [0.8]"},
    {.name = "top-k", .kind = ZS_FLAG_INT, .off = GO(g.top_k), .lo = 0, .hi = 1 << 30, .arg = "K",
     .help = "keep the K most likely tokens, 0 = all [0]"},
    {.name = "top-p", .kind = ZS_FLAG_FLOAT, .off = GO(g.top_p), .arg = "P",
     .help = "nucleus: the smallest set reaching probability P [1]"},
    {.name = "seed", .kind = ZS_FLAG_U64, .off = GO(g.seed), .arg = "S",
     .help = "sampling seed: the same seed gives the same text [1337]"},
    {.name = "eos", .kind = ZS_FLAG_INT, .off = GO(g.eos), .lo = -1, .hi = 1 << 30,
     .set_off = GO(eos_set), .arg = "ID",
     .help = "stop after this token, -1 = never [the tokenizer's EOS;\n"
             "without one, 50256 for a GPT-2 vocabulary, else -1]"},
    {.name = "seq", .kind = ZS_FLAG_INT, .off = GO(seq), .arg = "T",
     .help = "context window and KV-cache positions [the model's]"},
    {.name = "device-mem", .kind = ZS_FLAG_BYTES, .off = GO(cfg.device_mem), .arg = "SIZE",
     .help = "per-rank memory cap, e.g. 4G: under ZeRO-3 the whole model\n"
             "is gathered once when it fits, else each unit per token"},
    {.name = "no-cache", .kind = ZS_FLAG_SWITCH, .off = GO(g.no_cache),
     .help = "recompute the whole window for every token instead of\n"
             "one position per token with the KV cache (the cache's\n"
             "reference; the stderr banner line says which ran)"},
    {.name = "model", .kind = ZS_FLAG_STR, .off = GO(model), .arg = "NAME",
     .help = "must agree with SRC (supplies heads for a bare safetensors)"},
    {.name = "device", .kind = ZS_FLAG_DEVICE, .off = GO(cfg.module.device), .arg = "cpu|cuda|auto",
     .help = "where it computes (as train) [auto]"},
    {.name = "nproc", .kind = ZS_FLAG_INT, .off = GO(nproc), .lo = 1, .hi = 256, .arg = "N",
     .help = "ranks [1]"},
    {.name = "stage", .kind = ZS_FLAG_STAGE, .off = GO(cfg.module.stage), .arg = "ddp|1|2|3",
     .help = "sharding [ddp]"},
};

static const zs_flag_table GEN_TABLE = {
    .cmd = "generate",
    .rows = GEN_FLAGS,
    .count = sizeof GEN_FLAGS / sizeof GEN_FLAGS[0],
    .usage = "usage: zshard generate SRC [--prompt TEXT | --prompt-ids 'ID ID ...'] [options]\n"
             "SRC: a zshard checkpoint (or save dir), a safetensors file, a Hugging Face\n"
             "directory or an llm.c model file.\n",
    .positional = gen_src,
};

int zs_cli_generate(int argc, char **argv) {
    gen_opts o = {.cfg = zs_train_config_default(), .g = zs_gen_config_default(), .nproc = 1};
    int rc = zs_flag_parse(&GEN_TABLE, argc, argv, 1, &o, NULL);
    if (rc) return rc < 0 ? 0 : rc;
    zs_train_config cfg = o.cfg;
    zs_gen_config g = o.g;
    const char *src = o.src, *model = o.model, *prompt = o.prompt, *ids = o.ids;
    const char *tok_path = o.tok_path;
    int nproc = o.nproc, seq = o.seq, eos_set = o.eos_set;
    if (!src) return zs_cli_fail(2, "generate: a weights source SRC is required");
    if (prompt && ids) return zs_cli_fail(2, "generate: --prompt and --prompt-ids: pick one");
    if (g.top_p <= 0.0f) return zs_cli_fail(2, "generate: --top-p must be positive");
    if (nproc > 1 && !zs_cli_relaunched()) return zs_cli_relaunch("generate", argc, argv, nproc, 0);
    zs_cli_threads_setup();
    if ((rc = zs_cli_model_from("generate", src, model, &cfg.model))) return rc;
    int V = cfg.model.vocab, bytes = V == 256 && !tok_path;
    zs_tokenizer_t *tok = NULL;
    if (tok_path) {
        if (zs_tokenizer_load(tok_path, &tok) != ZS_OK)
            return zs_cli_fail(2, "generate: --tokenizer: %s", zs_last_error());
        /* A tokenizer id past the model's output layer would index outside the embedding;
         * fewer ids is fine (llm.c pads GPT-2's 50257 to 50304). */
        if (zs_tokenizer_vocab_size(tok) > V) {
            int n = zs_tokenizer_vocab_size(tok);
            zs_tokenizer_destroy(tok);
            return zs_cli_fail(2,
                               "generate: the tokenizer %s has %d token ids, more than the "
                               "vocabulary of %d of the model %s",
                               tok_path, n, V, src);
        }
    }
    if (prompt && !bytes && !tok)
        return zs_cli_fail(2,
                           "generate: %s has a vocabulary of %d tokens: give the prompt as token "
                           "ids (--prompt-ids) or a --tokenizer; text prompts need a byte-level "
                           "model",
                           src, V);
    if (ids && bytes)
        return zs_cli_fail(2, "generate: %s is a byte-level model: give --prompt TEXT", src);
    if (bytes && prompt && !*prompt)
        return zs_cli_fail(2, "generate: --prompt is empty: give some text, or leave --prompt out "
                              "to start from a newline");
    if (!eos_set) g.eos = tok ? zs_tokenizer_eos(tok) : V == 50257 ? 50256 : -1;
    const char *ws = getenv("WORLD_SIZE");
    cfg.batch = ws && atoi(ws) > 0 ? atoi(ws) : 1; /* one sequence per rank, rank 0's used */
    cfg.seq = seq > 0 ? seq : cfg.model.max_seq;
    cfg.data_path = NULL;

    int32_t *p = NULL, *out = NULL;
    int np = 0, nout = 0;
    if (bytes) {
        const char *text = prompt ? prompt : "\n";
        np = (int)strlen(text);
        p = malloc((size_t)(np ? np : 1) * sizeof *p);
        for (int i = 0; p && i < np; i++)
            p[i] = (unsigned char)text[i];
    } else if (ids) {
        if (parse_ids(ids, &p, &np) || np == 0) {
            zs_tokenizer_destroy(tok);
            return zs_cli_fail(2, "generate: --prompt-ids '%s' is not a list of token ids", ids);
        }
    } else if (tok) {
        /* No prompt: the template alone (LLaMA's <s>), else the EOS, as for token ids. */
        const char *text = prompt ? prompt : "";
        if (zs_tokenizer_encode(tok, text, strlen(text), 1, &p, &np) != ZS_OK) {
            zs_tokenizer_destroy(tok);
            return zs_cli_fail(2, "generate: --prompt: %s", zs_last_error());
        }
        if (np == 0 && g.eos >= 0) p[np++] = g.eos;
        if (np == 0) {
            free(p);
            zs_tokenizer_destroy(tok);
            return zs_cli_fail(2, "generate: the prompt encodes to no tokens and the tokenizer "
                                  "has no EOS to start from: give --prompt");
        }
    } else {
        p = malloc(sizeof *p);
        if (p) p[np++] = g.eos >= 0 ? g.eos : 0;
    }
    out = malloc((size_t)(g.max_tokens ? g.max_tokens : 1) * sizeof *out);
    if (!p || !out) {
        zs_tokenizer_destroy(tok);
        return zs_cli_fail(1, "generate: out of memory");
    }
    zs_trainer_t *t = NULL;
    zs_status st = zs_trainer_create(&cfg, &t);
    if (st == ZS_OK) st = zs_trainer_init_from(t, src);
    double secs = 0.0;
    char *text = NULL;
    size_t ntext = 0;
    if (st == ZS_OK) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        st = zs_trainer_generate(t, &g, p, np, out, g.max_tokens, &nout);
        clock_gettime(CLOCK_MONOTONIC, &b);
        secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    }
    if (st == ZS_OK && tok && zs_trainer_rank(t) == 0) {
        /* Prompt and sample decoded as one sequence, so a token's leading-space rule (the
         * SentencePiece Strip) applies once, at the start, as transformers' decode does. */
        int32_t *all = malloc((size_t)(np + nout) * sizeof *all);
        if (!all) st = zs_error(ZS_ERR_OOM, "out of memory");
        if (all) {
            /* A model's output layer may be wider than the tokenizer (llm.c pads GPT-2 to
             * 50304): such ids have no text; they are left out and counted, not hidden. */
            int n = 0, past = 0, nt = zs_tokenizer_vocab_size(tok);
            for (int i = 0; i < np + nout; i++) {
                int32_t id = i < np ? p[i] : out[i - np];
                if (id < nt && zs_tokenizer_token(tok, id))
                    all[n++] = id;
                else
                    past++;
            }
            if (past)
                fprintf(stderr,
                        "zshard generate: %d sampled ids have no token in %s (%d ids) and are "
                        "left out of the text\n",
                        past, tok_path, nt);
            st = zs_tokenizer_decode(tok, all, n, 1, &text, &ntext);
            free(all);
        }
    }
    if (st != ZS_OK) {
        free(p);
        free(out);
        zs_tokenizer_destroy(tok);
        zs_trainer_destroy(t);
        return zs_cli_fail(1, "generate: %s", zs_last_error());
    }
    if (zs_trainer_rank(t) == 0) {
        const char *info = zs_trainer_generate_info(t);
        fprintf(stderr, "zshard generate: %d tokens in %.2f s (%.1f tokens/s)%s%s\n", nout, secs,
                secs > 0 ? nout / secs : 0.0, info[0] ? "; " : "", info);
        if (tok) {
            fwrite(text, 1, ntext, stdout);
            putchar('\n');
        } else if (bytes) {
            fwrite(prompt ? prompt : "", 1, prompt ? strlen(prompt) : 0, stdout);
            for (int i = 0; i < nout; i++)
                putchar(out[i]);
            putchar('\n');
        } else {
            for (int i = 0; i < nout; i++)
                printf("%s%d", i ? " " : "", out[i]);
            printf("\n");
        }
    }
    free(p);
    free(out);
    free(text);
    zs_tokenizer_destroy(tok);
    zs_trainer_destroy(t);
    return 0;
}
