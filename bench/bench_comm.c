/* `zshard bench comm`: placeholder until the comm layer lands (issue 3). */
#include "cli/cli.h"

int zs_bench_comm(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return zs_cli_fail(2, "bench comm: the communication layer is not built yet");
}
