/* Memory in `zshard train`'s outputs: the JSONL final record's peaks (this process's, and with
 * --offload every rank's pinned host bytes beside the estimate) and --mem-report's table of
 * measured peaks by rank against the estimator (docs/sharding.md "Predicting memory"). */
#include "cli/train_mem.h"

#include "core/alloc.h"

#include <stdio.h>

void zs_train_json_mem(FILE *f) {
    zs_mem_stats ms;
    zs_mem_get_stats(&ms);
    fprintf(f, "\"peak_bytes\":{");
    for (int c = 0; c < ZS_MEM_NCAT; c++)
        fprintf(f, "%s\"%s\":%llu", c ? "," : "", zs_mem_category_name((zs_mem_category)c),
                (unsigned long long)ms.peak[c]);
    fprintf(f, "},\"peak_total_bytes\":%llu", (unsigned long long)ms.total_peak);
}

/* The host categories --offload fills on a GPU rank. */
static const zs_mem_category HOST_CATS[] = {ZS_MEM_PARAM_SHARD, ZS_MEM_GRAD_SHARD,
                                            ZS_MEM_OPTIM_STATE};
#define N_HOST_CATS (int)(sizeof HOST_CATS / sizeof HOST_CATS[0])

/* --offload: each rank's peak pinned host bytes of the offloaded state, by category, and the
 * estimator's (the final record's "host_peak_bytes_per_rank" and "host_estimate_bytes"). */
void zs_train_json_host_mem(FILE *f, int world, const zs_mem_stats *host,
                            const zs_mem_estimate *est) {
    fprintf(f, ",\"host_peak_bytes_per_rank\":[");
    for (int r = 0; r < world; r++) {
        uint64_t sum = 0;
        fprintf(f, "%s{", r ? "," : "");
        for (int i = 0; i < N_HOST_CATS; i++) {
            sum += host[r].peak[HOST_CATS[i]];
            fprintf(f, "%s\"%s\":%llu", i ? "," : "", zs_mem_category_name(HOST_CATS[i]),
                    (unsigned long long)host[r].peak[HOST_CATS[i]]);
        }
        fprintf(f, ",\"total\":%llu}", (unsigned long long)sum);
    }
    fprintf(f, "],\"host_estimate_bytes\":{");
    for (int i = 0; i < N_HOST_CATS; i++)
        fprintf(f, "%s\"%s\":%llu", i ? "," : "", zs_mem_category_name(HOST_CATS[i]),
                (unsigned long long)est->host_bytes[HOST_CATS[i]]);
    fprintf(f, ",\"total\":%llu}", (unsigned long long)est->host_total);
}

void zs_train_mem_report(int world, const zs_mem_stats *all, const zs_mem_estimate *est,
                         const zs_mem_stats *host) {
    printf("memory per rank (MiB): measured peak by rank vs estimate\n| category |");
    for (int r = 0; r < world; r++)
        printf(" rank %d |", r);
    printf(" estimate |\n|---|");
    for (int r = 0; r <= world; r++)
        printf("---:|");
    printf("\n");
    for (int c = 0; c <= ZS_MEM_NCAT; c++) {
        printf("| %s |", c < ZS_MEM_NCAT ? zs_mem_category_name((zs_mem_category)c) : "total");
        for (int r = 0; r < world; r++)
            printf(" %.2f |",
                   (double)(c < ZS_MEM_NCAT ? all[r].peak[c] : all[r].total_peak) / 1048576.0);
        printf(" %.2f |\n", (double)(c < ZS_MEM_NCAT ? est->bytes[c] : est->total) / 1048576.0);
    }
    if (!host) return;
    /* --offload: the state the device no longer holds, in pinned host memory. */
    for (int i = 0; i <= N_HOST_CATS; i++) {
        printf("| host (pinned): %s |",
               i < N_HOST_CATS ? zs_mem_category_name(HOST_CATS[i]) : "offload total");
        for (int r = 0; r < world; r++) {
            uint64_t v = 0;
            for (int k = 0; k < N_HOST_CATS; k++)
                if (k == i || i == N_HOST_CATS) v += host[r].peak[HOST_CATS[k]];
            printf(" %.2f |", (double)v / 1048576.0);
        }
        printf(" %.2f |\n",
               (double)(i < N_HOST_CATS ? est->host_bytes[HOST_CATS[i]] : est->host_total) /
                   1048576.0);
    }
}
