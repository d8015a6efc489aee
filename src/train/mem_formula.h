/* The model-state formula of a stage (docs/architecture.md "Memory accounting") as the memory
 * estimator's callers show it: `zshard mem` and `zshard bench memory`. */
#ifndef ZS_TRAIN_MEM_FORMULA_H
#define ZS_TRAIN_MEM_FORMULA_H

#include "zshard.h"

#include <stddef.h>
#include <stdint.h>

/* The formula of stage under mo as text ("4Ψ + 12Ψ/N") in buf (n bytes); returns buf. */
const char *zs_mem_formula_text(int stage, const zs_mem_options *mo, char *buf, size_t n);
/* Its bytes for psi (padded) parameters on world ranks. */
uint64_t zs_mem_formula_bytes(int stage, const zs_mem_options *mo, uint64_t psi, int world);

#endif
