/* What the fuzz targets share (fuzz/input.c): an input cut into parts, and files in a scratch
 * folder of the process's own for the parsers that only read files. */
#ifndef ZS_FUZZ_INPUT_H
#define ZS_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

/* The marker between the parts of one input ("\n#--#\n"): several files, or a file and the
 * text to run through what it describes. */
#define ZF_SEP "\n#--#\n"

/* Part k (0-based) of data[0, size) cut at ZF_SEP: *n bytes at the returned pointer, or NULL
 * (and *n = 0) when the input has fewer parts. The last part asked for takes the rest. */
const uint8_t *zf_part(const uint8_t *data, size_t size, int k, int last, size_t *n);

/* A NUL-terminated malloc'd copy of data[0, n) (a parser's string argument). */
char *zf_strndup(const uint8_t *data, size_t n);

/* This process's scratch folder ($TMPDIR or /tmp, made on first use and removed with its files
 * at exit), and the path of `name` in it (a static buffer, rewritten by the next call). */
const char *zf_dir(void);
const char *zf_path(const char *name);
/* Write data[0, n) to zf_path(name), replacing it; data NULL removes the file instead. Returns
 * the path. A failed write aborts: the input could not be tried. */
const char *zf_write(const char *name, const uint8_t *data, size_t n);

#endif
