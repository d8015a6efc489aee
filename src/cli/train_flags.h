/* `zshard train`'s flags as one table of the argument library (flags.h): the command line, a
 * --config file, the help and --print-config all read and write train_opts through it, so a
 * flag has one name, one type, one range and one parser wherever it is given. */
#ifndef ZS_CLI_TRAIN_FLAGS_H
#define ZS_CLI_TRAIN_FLAGS_H

#include "args/flags.h"
#include "cli/train_args.h"

#include <stdio.h>

/* train's table: rows over train_opts, in help order. */
const zs_flag_table *zs_train_flags(void);

/* The effective configuration: as a YAML document that `--config` reads back into the same run,
 * and as one JSON object (the log's and the checkpoint manifest's record). */
void zs_train_config_write_yaml(const train_opts *o, FILE *f);
/* JSON object text, malloc'd (caller frees); NULL when out of memory. */
char *zs_train_config_json(const train_opts *o);

#endif
