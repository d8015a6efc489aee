/* zshard command-line entry: dispatches to the subcommands. */
#include "cli/cli.h"
#include "zshard.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int zs_cli_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zshard: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
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
            "  help      this text; `zshard <command> --help` for a command's flags\n",
            ZS_VERSION_MAJOR, ZS_VERSION_MINOR, ZS_VERSION_PATCH);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    zs_cli_set_argv(argv);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train")) return zs_cli_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return zs_cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return zs_cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "mem")) return zs_cli_mem(argc - 1, argv + 1);
    if (!strcmp(cmd, "ckpt")) return zs_cli_ckpt(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return zs_cli_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "generate")) return zs_cli_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("zshard %d.%d.%d\n", ZS_VERSION_MAJOR, ZS_VERSION_MINOR, ZS_VERSION_PATCH);
        return 0;
    }
    fprintf(stderr, "zshard: unknown command '%s' (try `zshard help`)\n", cmd);
    return 2;
}
