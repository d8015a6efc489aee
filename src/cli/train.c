/* `zshard train`: placeholder, filled in with the trainer. */
#include "cli/cli.h"

int zs_cli_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return zs_cli_fail(2, "train: not built yet");
}
