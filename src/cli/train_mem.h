/* Memory in `zshard train`'s outputs (train_mem.c). */
#ifndef ZS_CLI_TRAIN_MEM_H
#define ZS_CLI_TRAIN_MEM_H

#include "zshard.h"

#include <stdio.h>

/* "peak_bytes":{...},"peak_total_bytes":N of this process's compute ledger. */
void zs_train_json_mem(FILE *f);
/* --offload: ,"host_peak_bytes_per_rank":[...],"host_estimate_bytes":{...}: each rank's peak
 * pinned host bytes of the offloaded categories and the estimator's. */
void zs_train_json_host_mem(FILE *f, int world, const zs_mem_stats *host,
                            const zs_mem_estimate *est);
/* --mem-report: measured peaks by rank against the estimate, per category; host (NULL
 * without offload) adds the pinned host rows. */
void zs_train_mem_report(int world, const zs_mem_stats *all, const zs_mem_estimate *est,
                         const zs_mem_stats *host);

#endif
