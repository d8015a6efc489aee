/* libFuzzer target for run configuration files (`zshard train --config FILE`): the file read by
 * src/cli/config.c (libyaml's parser, and the JSON check for a JSON file), every entry applied
 * through train's flag table (src/cli/train_args.c, train_flags.c), and the promise that
 * --print-config's YAML reads back into the same settings: a file that loads is written out
 * as --print-config writes it, loaded again, and must give the same YAML. The first byte picks
 * the name (config.yaml or config.json: a .json file is held to JSON); the rest is the file.
 * Linked with those CLI sources and the argument library (flags.c), whose error lines go to
 * the printer below instead of stderr.
 * Replayed over fuzz/corpus_config by the ctest fuzz_config; scripts/fuzz.sh runs it. */
#include "args/flags.h"
#include "cli/train_args.h"
#include "cli/train_flags.h"
#include "core/log.h"
#include "input.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The argument library's error lines, kept in a buffer: the messages are built as in the CLI
 * (their arguments read), without a line on stderr for every input. */
static char g_msg[4096];
static void keep_msg(const char *line) {
    snprintf(g_msg, sizeof g_msg, "%s", line);
}

/* train --config path --data d: 0 and the effective configuration as --print-config writes
 * it (*yaml malloc'd), or the usage error's status. */
static int parse(const char *path, char **yaml) {
    char *argv[] = {"train", "--config", (char *)path, "--data", "fuzz.bin", NULL};
    train_opts o;
    *yaml = NULL;
    int rc = zs_train_parse(5, argv, &o);
    if (rc) return rc;
    size_t n;
    FILE *f = open_memstream(yaml, &n);
    if (!f) abort();
    zs_train_config_write_yaml(&o, f);
    fclose(f);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    zs_flag_set_printer(keep_msg);
    zs_log_level level = zs_log_get_level();
    char path[8192], again[8192];
    snprintf(path, sizeof path, "%s",
             zf_write(data[0] % 2 ? "config.json" : "config.yaml", data + 1, size - 1));
    char *first = NULL, *second = NULL;
    if (parse(path, &first) == 0) {
        snprintf(again, sizeof again, "%s",
                 zf_write("again.yaml", (const uint8_t *)first, strlen(first)));
        int rc = parse(again, &second);
        if (rc || strcmp(first, second)) {
            fprintf(stderr,
                    "--print-config's output does not read back the same (status %d: %s)\n"
                    "---- first:\n%s---- read back:\n%s",
                    rc, rc ? g_msg : "", first, second ? second : "(not read)\n");
            abort();
        }
    }
    free(first);
    free(second);
    zs_log_set_level(level); /* a file's verbose: true would stay for every later input */
    return 0;
}
