/* Implementation of the cost checks' helpers in emucost.h. */
#include "emucost.h"

#include "backend/cuda_device.h"
#include "backend/device.h"

#include <dirent.h>
#include <string.h>

const zs_ops *gpu;

static float *hf(size_t n) {
    return zt_hbuf(n * sizeof(float));
}

static float *randn(size_t n) {
    float *x = hf(n);
    zt_fill_normal(x, n, 1.0f);
    return x;
}

float *drand(size_t n) {
    return zt_dup(randn(n), n * sizeof(float));
}

const int32_t *docs_seg(int docs, int B, int T, const int32_t **h) {
    *h = NULL;
    if (!docs) return NULL;
    int32_t *seg = zt_hbuf((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        int m = b == 1 ? 1 + (int)zt_uniform(0, T) : T;
        int32_t *r = seg + (size_t)b * T;
        for (int t = 0; t < T; t++)
            r[t] = t == 0 ? 0 : t >= m ? t : zt_uniform(0, 1) < 0.125 ? t : r[t - 1];
    }
    *h = seg;
    return zt_dup(seg, (size_t)B * T * sizeof(int32_t));
}

int seg_lo(const int32_t *seg, size_t bt) {
    return seg ? (int)seg[bt] : 0;
}

sectors sec_new(size_t nbytes) {
    sectors s = {zt_hbuf(nbytes / 32 + 1), nbytes / 32 + 1};
    memset(s.hit, 0, s.n);
    return s;
}

void sec_add(sectors *s, size_t lo, size_t hi) {
    for (size_t q = lo / 32; hi > lo && q <= (hi - 1) / 32; q++)
        s->hit[q] = 1;
}

double sec_bytes(const sectors *s) {
    double n = 0;
    for (size_t q = 0; q < s->n; q++)
        n += s->hit[q];
    return 32.0 * n;
}

/* ---- the kernels of the sources, and the records of one profiled op --------------------- */

#define MAX_KERNELS 64
static struct kernel {
    char name[96];
    int seen;
    int mine; /* of a source file of this test's part */
    zs_emu_record first;
} g_k[MAX_KERNELS];
static int g_nk, g_nmine;
static const char *g_name;

/* The sources of the attention kernels: test_emu_costs_attn.c's (EC_ATTENTION); of the casts
 * and the embedding: test_emu_costs_mem.c's (EC_MEMORY); every other .cu file, a new one too,
 * is test_emu_costs.c's (EC_OPS). */
static const char *const g_attention_cu[] = {"attention_cuda.cu", "decode_cuda.cu", "flash_cuda.cu",
                                             "flash_tc_cuda.cu", "flash_tc_bwd_cuda.cu"};
static const char *const g_memory_cu[] = {"cast_cuda.cu", "embedding_cuda.cu"};

static ec_part part_of(const char *file) {
    for (size_t i = 0; i < sizeof g_attention_cu / sizeof g_attention_cu[0]; i++)
        if (!strcmp(file, g_attention_cu[i])) return EC_ATTENTION;
    for (size_t i = 0; i < sizeof g_memory_cu / sizeof g_memory_cu[0]; i++)
        if (!strcmp(file, g_memory_cu[i])) return EC_MEMORY;
    return EC_OPS;
}

/* Every "__global__ void NAME(" (or "__global__ void ZS_BOUNDS(..) NAME(") of the .cu files in
 * src/backend/cuda (as emu_coverage.sh does),
 * found from this file's own path; those of `part`'s files marked mine. */
static void load_kernels(ec_part part) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    ZT_REQUIRE(slash, "cannot find the source tree from %s", __FILE__);
    snprintf(slash, sizeof dir - (size_t)(slash - dir), "/../src/backend/cuda");
    DIR *d = opendir(dir);
    ZT_REQUIRE(d, "cannot open %s", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".cu") != 0) continue;
        int mine = part_of(e->d_name) == part;
        char path[8192], line[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        ZT_REQUIRE(f, "cannot read %s", path);
        while (fgets(line, sizeof line, f)) {
            const char *g = strstr(line, "__global__ void ");
            if (!g) continue;
            g += strlen("__global__ void ");
            if (!strncmp(g, "ZS_BOUNDS(", 10) && strstr(g, ") ")) g = strstr(g, ") ") + 2;
            size_t n = strspn(g, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
            if (n == 0 || g[n] != '(') continue;
            ZT_REQUIRE(g_nk < MAX_KERNELS && n < sizeof g_k[0].name, "too many kernels");
            memcpy(g_k[g_nk].name, g, n);
            g_k[g_nk].mine = mine;
            g_nmine += mine;
            g_k[g_nk++].name[n] = 0;
        }
        fclose(f);
    }
    closedir(d);
    ZT_REQUIRE(g_nk > 0, "no __global__ kernels found in %s", dir);
}

static struct kernel *kernel_named(const char *name) {
    for (int i = 0; i < g_nk; i++)
        if (!strcmp(g_k[i].name, name)) return &g_k[i];
    return NULL;
}

zs_emu_record g_rec[MAX_RECS];
int g_used[MAX_RECS];
size_t g_nrec;

/* Every kernel launch of the last profiled op was checked. */
static void recs_all_checked(void) {
    for (size_t i = 0; i < g_nrec; i++)
        ZT_CHECK(g_used[i] || !kernel_named(g_rec[i].name), "launch of %s not checked",
                 g_rec[i].name);
    g_nrec = 0;
}

void prof_start(void) {
    recs_all_checked();
    ZT_OK(gpu->sync(NULL));
    zs_emu_profile_start();
}

void prof_stop(void) {
    zs_emu_profile_stop();
    g_nrec = zs_emu_profile_count();
    ZT_REQUIRE(g_nrec <= MAX_RECS, "%zu records from one op", g_nrec);
    for (size_t i = 0; i < g_nrec; i++) {
        ZT_REQUIRE(zs_emu_profile_get(i, &g_rec[i]) == 0, "record %zu", i);
        g_used[i] = 0;
    }
}

const zs_emu_record *rec(const char *name) {
    static zs_emu_record none;
    const zs_emu_record *r = NULL;
    int n = 0;
    for (size_t i = 0; i < g_nrec; i++)
        if (!strcmp(g_rec[i].name, name)) {
            r = &g_rec[i];
            g_used[i] = 1;
            n++;
        }
    ZT_CHECK(n == 1, "%d launches of %s recorded, expected 1", n, name);
    return r ? r : &none;
}

void check_rec(const zs_emu_record *r, int k, double extra, const char *why) {
    struct kernel *kn = kernel_named(r->name);
    double decl = r->ideal_bytes, want = decl + extra, got = r->dram_read + r->dram_write;
    ZT_CHECK(kn != NULL, "record '%s' is no __global__ kernel of src/backend/cuda", r->name);
    ZT_CHECK(r->declared == 1, "%s: no ZS_COST before its launch", r->name);
    /* tensor FLOPs: the declaration against the mma instructions the warps really executed */
    ZT_CHECK(r->mma_flops == r->mma_counted,
             "%s: %g tensor-core FLOPs declared, %g executed by its mma instructions", r->name,
             r->mma_flops, r->mma_counted);
    ZT_CHECK(r->blocks_run == r->blocks, "%s: %llu of %llu blocks ran", r->name,
             (unsigned long long)r->blocks_run, (unsigned long long)r->blocks);
    ZT_CHECK(want <= got + 32.0 * k && got <= want + 32.0 * k + 0.02 * want,
             "%s: declared %.0f B (%+.0f by design: %s), measured %.0f B (read %.0f, written "
             "%.0f), k=%d",
             r->name, decl, extra, why ? why : "none", got, r->dram_read, r->dram_write, k);
    printf("  %-30s declared %9.0f B  measured %9.0f B", r->name, decl, got);
    if (extra) printf("  (%+.0f B by design: %s)", extra, why);
    printf("  flops %.0f\n", r->flops);
    if (kn && !kn->seen++) kn->first = *r;
}

void check_scaling(const char *name, double f1, double s1, double f2, double s2) {
    ZT_CHECK(f1 * s2 == f2 * s1 && (f1 > 0 || f2 == 0),
             "%s: %.0f FLOPs at size %.0f but %.0f at %.0f: not proportional", name, f1, s1, f2,
             s2);
}

void ec_start(const char *name, ec_part part) {
    zt_init(name);
    zt_gpu_require();
    const zs_device *dev = NULL;
    ZT_OK(zs_backend_select("cuda", &gpu, &dev));
    ZT_REQUIRE(gpu != NULL, "no CUDA ops table");
    ZT_OK(zs_cuda_set_device(0));
    g_name = name;
    load_kernels(part);
    printf("%s: %d __global__ kernels in src/backend/cuda, %d of them in this test's files\n", name,
           g_nk, g_nmine);
}

int ec_finish(void) {
    recs_all_checked();
    printf("%s: per kernel of this test's files (its first launch checked):\n", g_name);
    int missing = 0;
    for (int i = 0; i < g_nk; i++) {
        const zs_emu_record *r = &g_k[i].first;
        if (!g_k[i].mine) continue;
        if (!g_k[i].seen) {
            missing++;
            printf("  %-30s NEVER CHECKED\n", g_k[i].name);
            continue;
        }
        printf("  %-30s %2d launches  declared %9.0f B  measured %9.0f B  flops %.0f\n",
               g_k[i].name, g_k[i].seen, r->ideal_bytes, r->dram_read + r->dram_write, r->flops);
    }
    ZT_CHECK(missing == 0, "%d of %d kernels never checked", missing, g_nmine);
    return zt_finish();
}
