/* `zshard bench <what>`: dispatch to the benchmarks in bench/. */
#include "bench/bench.h"
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

int zs_cli_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf(
            "usage: zshard bench step|comm|memory|attention|optim [options]  (`zshard bench step "
            "--help`)\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "step")) return zs_bench_step(argc - 1, argv + 1);
    if (!strcmp(argv[1], "comm")) return zs_bench_comm(argc - 1, argv + 1);
    if (!strcmp(argv[1], "memory")) return zs_bench_memory(argc - 1, argv + 1);
    if (!strcmp(argv[1], "attention")) return zs_bench_attention(argc - 1, argv + 1);
    if (!strcmp(argv[1], "optim")) return zs_bench_optim(argc - 1, argv + 1);
    return zs_cli_fail(
        2, "unknown benchmark '%s' (expected step, comm, memory, attention or optim)", argv[1]);
}
