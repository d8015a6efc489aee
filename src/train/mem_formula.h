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

/* Bytes one rank sends per step under zshard's direct exchange (docs/sharding.md "Bytes across
 * hosts", "Hybrid sharding"): to the other ranks of its shard group (*group: the stage's gathers
 * and reduce-scatters), to its replicas (*replicas: the gradient shard's all-reduce), and of
 * both, to ranks on other hosts (*across). world ranks, per_host of them on each host, in shard
 * groups of shard_group consecutive ranks (the world: flat; HSDP otherwise, its groups aligned
 * with hosts); psi padded parameters, mo's dtypes, grad_accum micro-batches. ZeRO-3's figure
 * leaves out the units kept between forward and backward, so it is an upper bound by at most a
 * unit or two per step. */
void zs_mem_bytes_sent(int stage, const zs_mem_options *mo, uint64_t psi, int world, int per_host,
                       int shard_group, int grad_accum, double *group, double *replicas,
                       double *across);

#endif
