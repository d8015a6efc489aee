/* `zshard bench step`: placeholder, filled in with the trainer. */
#include "cli/cli.h"

int zs_bench_step(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return zs_cli_fail(2, "bench step: not built yet");
}
