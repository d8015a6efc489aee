/* `zshard generate SRC`: text from a byte-level model, token ids from a token model, or text
 * through a Hugging Face tokenizer (--tokenizer), with temperature, top-k, top-p, a seed, a
 * token budget and a stop token. Any weights source; any world size and stage (each new token
 * is a forward every rank takes part in). */
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/train_ops.h"
#include "core/status.h"
#include "data/tokenizer.h"
#include "zshard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f, "usage: zshard generate SRC [--prompt TEXT | --prompt-ids 'ID ID ...'] [options]\n"
               "SRC: a zshard checkpoint (or save dir), a safetensors file, a Hugging Face\n"
               "directory or an llm.c model file.\n"
               "  --prompt TEXT       the text to continue: byte-level models, or any model\n"
               "                      with --tokenizer [newline; with a tokenizer, its BOS\n"
               "                      template or else its EOS token]\n"
               "  --prompt-ids IDS    token models: token ids, space separated [the EOS token]\n"
               "  --tokenizer PATH    a Hugging Face tokenizer: a directory with tokenizer.json\n"
               "                      or vocab.json + merges.txt, or one of those files. The\n"
               "                      prompt is encoded with it (its template, e.g. LLaMA's\n"
               "                      <s>, applied), the output decoded (special tokens left\n"
               "                      out), and its EOS token is the default --eos. BPE only\n"
               "                      (GPT-2, Llama-2/3 style); see docs/tokenizer.md\n"
               "  --max-tokens N      new tokens at most [200]\n"
               "  --temperature F     0 = greedy (argmax) [0.8]\n"
               "  --top-k K           keep the K most likely tokens, 0 = all [0]\n"
               "  --top-p P           nucleus: the smallest set reaching probability P [1]\n"
               "  --seed S            sampling seed: the same seed gives the same text [1337]\n"
               "  --eos ID            stop after this token, -1 = never [the tokenizer's EOS;\n"
               "                      without one, 50256 for a GPT-2 vocabulary, else -1]\n"
               "  --seq T             context window and KV-cache positions [the model's]\n"
               "  --device-mem SIZE   per-rank memory cap, e.g. 4G: under ZeRO-3 the whole model\n"
               "                      is gathered once when it fits, else each unit per token\n"
               "  --no-cache          recompute the whole window for every token instead of\n"
               "                      one position per token with the KV cache (the cache's\n"
               "                      reference; the stderr banner line says which ran)\n"
               "  --model NAME        must agree with SRC (supplies heads for a bare safetensors)\n"
               "  --device cpu|cuda|auto   where it computes (as train) [auto]\n"
               "  --nproc N, --stage ddp|1|2|3   ranks and sharding [1, ddp]\n");
}

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

int zs_cli_generate(int argc, char **argv) {
    zs_train_config cfg = zs_train_config_default();
    zs_gen_config g = zs_gen_config_default();
    const char *src = NULL, *model = NULL, *prompt = NULL, *ids = NULL, *tok_path = NULL;
    int nproc = 1, rc = 0, seq = 0, eos_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (zs_arg_is_help(a)) {
            usage(stdout);
            return 0;
        }
        if (strncmp(a, "--", 2)) {
            if (src) return zs_cli_fail(2, "generate: unexpected argument '%s'", a);
            src = a;
            continue;
        }
        if (!strcmp(a, "--no-cache")) {
            g.no_cache = 1;
            continue;
        }
        if (!(v = zs_arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "--prompt"))
            prompt = v;
        else if (!strcmp(a, "--prompt-ids"))
            ids = v;
        else if (!strcmp(a, "--tokenizer"))
            tok_path = v;
        else if (!strcmp(a, "--max-tokens"))
            rc = zs_arg_int_range(a, v, 0, 1 << 20, &g.max_tokens);
        else if (!strcmp(a, "--temperature"))
            rc = zs_arg_float(a, v, &g.temperature);
        else if (!strcmp(a, "--top-k"))
            rc = zs_arg_int_range(a, v, 0, 1 << 30, &g.top_k);
        else if (!strcmp(a, "--top-p"))
            rc = zs_arg_float(a, v, &g.top_p);
        else if (!strcmp(a, "--seed"))
            rc = zs_arg_u64(a, v, &g.seed);
        else if (!strcmp(a, "--eos")) {
            rc = zs_arg_int_range(a, v, -1, 1 << 30, &g.eos);
            eos_set = 1;
        } else if (!strcmp(a, "--seq"))
            rc = zs_arg_int(a, v, &seq);
        else if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--device-mem")) {
            if (zs_parse_bytes(v, &cfg.device_mem) != ZS_OK)
                return zs_cli_fail(2, "--device-mem: %s", zs_last_error());
        } else if (!strcmp(a, "--nproc"))
            rc = zs_arg_int_range(a, v, 1, 256, &nproc);
        else if (!strcmp(a, "--stage"))
            rc = zs_arg_stage(a, v, &cfg.stage);
        else if (!strcmp(a, "--device"))
            rc = zs_arg_device(a, v, &cfg.device);
        else
            return zs_cli_fail(2, "generate: unknown flag '%s' (see zshard generate --help)", a);
        if (rc) return rc;
    }
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
