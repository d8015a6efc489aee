/* Run configuration files for `--config FILE` (train, mem, eval, generate, tokenize): YAML
 * (libyaml) or JSON (which YAML reads too), one mapping of long flag names to single values.
 * Validation against the flags happens through the command's flag table (flags.c). */
#ifndef ZS_CLI_CONFIG_H
#define ZS_CLI_CONFIG_H

typedef struct zs_config_entry {
    char *key;
    char *value; /* NULL for a YAML null (~, null, or nothing after the colon) */
    int line;    /* 1-based, for messages */
    int quoted;  /* the value was written in quotes: a string, never a number or a boolean */
} zs_config_entry;

typedef struct zs_config {
    char *path;
    int n;
    zs_config_entry *e;
} zs_config;

/* Read path. Returns 0, or prints one message naming the file (and line) and returns 2: a file
 * that cannot be read, a syntax error anywhere in it (found before any value is read, so an
 * unclosed list is a syntax error; a file that is JSON, by its .json name or its first '{', is
 * held to JSON's syntax: no trailing commas, no comments), a top level that is not a mapping, a
 * key that is not a plain name, a value that is a list or mapping, a key given twice. */
int zs_config_load(const char *path, zs_config *out);
void zs_config_free(zs_config *c);

#endif
