/* `zshard run`: placeholder until the launcher lands (issue 3). */
#include "cli/cli.h"

int zs_cli_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return zs_cli_fail(2, "run: the launcher is not built yet");
}
