/* zshard command-line entry: dispatches to the subcommands. */
#include "cli/cli.h"
#include "args/flags.h"
#include "zshard.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The argument library's error printer under the CLI's name. */
int zs_cli_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    zs_flag_vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

static void usage(FILE *f) {
    fprintf(f,
            "zshard %d.%d.%d - sharded data-parallel training of transformer language models\n"
            "\n"
            "usage: zshard <command> [options]\n"
            "\n"
            "commands:\n"
            "  train     train a model on a text file or llm.c token shards\n"
            "  run       launch N local ranks of a command (torchrun equivalent)\n"
            "  mem       predict per-rank memory by category for a model, world size and stage\n"
            "  bench     benchmarks: bench step (training step vs sgemm), bench comm\n"
            "  ckpt      checkpoints: inspect, export (hf, safetensors, llm.c), import, reshard\n"
            "  eval      loss and perplexity of a model on a text or token file\n"
            "  generate  text or tokens from a model (KV cache; temperature, top-k, top-p)\n"
            "  tokenize  a corpus (text, folders, JSONL) into token shards with a Hugging Face\n"
            "            tokenizer\n"
            "  help      this text; `zshard <command> --help` for a command's flags\n",
            ZS_VERSION_MAJOR, ZS_VERSION_MINOR, ZS_VERSION_PATCH);
}

/* argparse's --flag=value, accepted by every command: split into --flag value before the
 * command's own parser sees it. Stops at a bare "--" (what follows belongs to another program,
 * `zshard run -- prog --x=1`). Returns a new argv (argc updated), or NULL when out of memory. */
static char **split_flag_values(int *argc, char **argv) {
    int n = *argc, k = 0, extra = 0;
    for (int i = 0; i < n && strcmp(argv[i], "--"); i++)
        extra += !strncmp(argv[i], "--", 2) && strchr(argv[i], '=') && argv[i][2] != '=';
    char **out = calloc((size_t)(n + extra + 1), sizeof *out);
    if (!out) return NULL;
    int split = 1;
    for (int i = 0; i < n; i++) {
        char *a = argv[i], *eq = strchr(a, '=');
        if (split && !strcmp(a, "--")) split = 0;
        if (split && !strncmp(a, "--", 2) && eq && a[2] != '=') {
            *eq = '\0'; /* argv's strings are ours to modify */
            out[k++] = a;
            out[k++] = eq + 1;
        } else {
            out[k++] = a;
        }
    }
    out[k] = NULL;
    *argc = k;
    return out;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    char **split = split_flag_values(&argc, argv);
    if (!split) return zs_cli_fail(1, "out of memory");
    argv = split;
    zs_cli_set_argv(argv);
    const char *cmd = argv[1];
    /* `zshard help CMD` is `zshard CMD --help`. */
    static char help_flag[] = "--help";
    char *help_argv[4] = {argv[0], NULL, help_flag, NULL};
    if (!strcmp(cmd, "help") && argc >= 3 && argv[2][0] != '-') {
        static const char *known[] = {"train", "run",  "bench",    "mem",
                                      "ckpt",  "eval", "generate", "tokenize"};
        int found = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            found |= !strcmp(argv[2], known[i]);
        if (!found)
            return zs_cli_fail(2, "help: unknown command '%s' (try `zshard help`)", argv[2]);
        help_argv[1] = argv[2];
        argv = help_argv;
        argc = 3;
        cmd = argv[1];
    }
    if (!strcmp(cmd, "train")) return zs_cli_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return zs_cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return zs_cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "mem")) return zs_cli_mem(argc - 1, argv + 1);
    if (!strcmp(cmd, "ckpt")) return zs_cli_ckpt(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return zs_cli_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "generate")) return zs_cli_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return zs_cli_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("zshard %d.%d.%d\ncomm backends built:", ZS_VERSION_MAJOR, ZS_VERSION_MINOR,
               ZS_VERSION_PATCH);
        /* what this build can start (nccl also needs a GPU here) */
        for (int b = ZS_COMM_SHM; b <= ZS_COMM_GLOO; b++)
            if (zs_comm_backend_available((zs_comm_backend)b))
                printf(" %s", zs_comm_backend_name((zs_comm_backend)b));
        printf("\n");
        return 0;
    }
    fprintf(stderr, "zshard: unknown command '%s' (try `zshard help`)\n", cmd);
    return 2;
}
