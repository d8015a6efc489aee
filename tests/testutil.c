/* Implementation of the small test harness in testutil.h. */
#include "testutil.h"

#include "backend/cuda_device.h"
#include <dirent.h>
#include <stdarg.h>

#include <string.h>
#include <sys/wait.h>
#include <time.h>

int zt_failures = 0;
int zt_checks = 0;
static uint64_t g_state = 0x853c49e6748fea9bull;
static const char *g_name = "test";

static uint64_t next_u64(void) {
    /* splitmix64: good enough for test inputs, trivially reproducible. */
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void init_seed(const char *name, uint64_t dflt) {
    g_name = name;
    const char *e = getenv("ZS_TEST_SEED");
    uint64_t seed = e ? strtoull(e, NULL, 0) : dflt;
    g_state = seed;
    printf("%s: ZS_TEST_SEED=%llu\n", name, (unsigned long long)seed);
}

void zt_init(const char *name) {
    init_seed(name, (uint64_t)time(NULL) ^ (uint64_t)clock());
}

void zt_init_fixed(const char *name, uint64_t seed) {
    init_seed(name, seed);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char **zt_dir_names(const char *dir, int *count) {
    DIR *d = opendir(dir);
    ZT_REQUIRE(d, "open folder %s", dir);
    struct dirent *e;
    char **names = NULL;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (size_t)(n + 1) * sizeof *names);
        ZT_REQUIRE(names, "out of memory listing %s", dir);
        names[n] = zt_malloc(strlen(e->d_name) + 1);
        strcpy(names[n++], e->d_name);
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, by_name);
    *count = n;
    return names;
}

int zt_finish(void) {
    printf("%s: %d checks, %d failed\n", g_name, zt_checks, zt_failures);
    if (zt_checks == 0) {
        printf("%s: no checks ran: failing\n", g_name);
        return 1;
    }
    return zt_failures ? 1 : 0;
}

void zt_skip(const char *why) {
    printf("%s: SKIP: %s\n", g_name, why);
    exit(77);
}

double zt_uniform(double lo, double hi) {
    return lo + (hi - lo) * ((double)(next_u64() >> 11) * (1.0 / 9007199254740992.0));
}

double zt_normal(void) {
    double u1 = zt_uniform(0, 1), u2 = zt_uniform(0, 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void zt_fill_uniform(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)zt_uniform(lo, hi);
}

void zt_fill_normal(float *x, size_t n, float std) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(std * zt_normal());
}

void zt_poison(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
}

double zt_max_err(const float *a, const double *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs(b[i]));
        if (isnan(d)) return INFINITY;
        if (d > worst) worst = d;
    }
    return worst;
}

double zt_max_err_ff(const float *a, const float *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (isnan(d)) return INFINITY;
        if (d > worst) worst = d;
    }
    return worst;
}

void zt_expect_bits(const char *what, const void *got, const void *want, size_t nbytes) {
    const unsigned char *g = got, *w = want;
    size_t first = nbytes;
    for (size_t i = 0; i < nbytes && first == nbytes; i++)
        if (g[i] != w[i]) first = i;
    ZT_CHECK(first == nbytes, "%s: not bit for bit (first differing byte %zu of %zu)", what, first,
             nbytes);
    if (first == nbytes) printf("ok %s\n", what);
}

void *zt_malloc(size_t nbytes) {
    void *p = malloc(nbytes ? nbytes : 1);
    ZT_REQUIRE(p != NULL, "out of memory allocating %zu bytes", nbytes);
    return p;
}

#define ZT_MAX_BUFS 256
static void *g_dev[ZT_MAX_BUFS], *g_host[ZT_MAX_BUFS];
static int g_ndev, g_nhost;

void *zt_hbuf(size_t nbytes) {
    ZT_REQUIRE(g_nhost < ZT_MAX_BUFS, "more than %d host buffers in one check", ZT_MAX_BUFS);
    return g_host[g_nhost++] = zt_malloc(nbytes + 16);
}

void *zt_dbuf(size_t nbytes) {
    void *p = NULL;
    ZT_REQUIRE(g_ndev < ZT_MAX_BUFS, "more than %d device buffers in one check", ZT_MAX_BUFS);
    ZT_OK(zs_cuda_alloc(ZS_MEM_WORKSPACE, nbytes ? nbytes : 1, "test buffer", &p));
    ZT_REQUIRE((uintptr_t)p % 256 == 0, "device buffer %p not 256-byte aligned", p);
    return g_dev[g_ndev++] = p;
}

void *zt_dup(const void *h, size_t nbytes) {
    void *d = zt_dbuf(nbytes);
    if (nbytes) ZT_OK(zs_cuda_memcpy_h2d(d, h, nbytes));
    return d;
}

void *zt_hcopy(const void *d, size_t nbytes) {
    void *h = zt_hbuf(nbytes);
    if (nbytes) ZT_OK(zs_cuda_memcpy_d2h(h, d, nbytes));
    return h;
}

void zt_release(void) {
    for (int i = 0; i < g_ndev; i++)
        zs_cuda_free(g_dev[i]);
    for (int i = 0; i < g_nhost; i++)
        free(g_host[i]);
    g_ndev = g_nhost = 0;
}

void zt_gpu_require(void) {
    const char *g = getenv("ZS_GPU");
    if (!zs_cuda_built())
        zt_skip("this build has no CUDA backend: without the CUDA toolkit's headers there is no "
                "emulated GPU either (docs/cuda.md)");
    if (zs_cuda_device_count() == 0)
        zt_skip(g && !strcmp(g, "real") ? "no CUDA device is visible"
                                        : "no CUDA device is visible and this program is not "
                                          "built on the emulated GPU");
}

int zt_gpus_for(int n, const char *what) {
    const char *g = getenv("ZS_GPU");
    if (!(g && !strcmp(g, "real"))) return 1;
    int k = zs_cuda_device_count();
    if (k >= n) return 1;
    printf("not run: %s needs %d GPUs, %d visible\n", what, n, k);
    return 0;
}

/* GCC says __SANITIZE_ADDRESS__, clang __has_feature(address_sanitizer). */
#if defined(__SANITIZE_ADDRESS__)
#define ZT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ZT_ASAN 1
#endif
#endif
#ifndef ZT_ASAN
#define ZT_ASAN 0
#endif

int zt_sanitized(void) {
    return ZT_ASAN;
}

int zt_unsanitized_for(const char *what, const char *why) {
    if (!ZT_ASAN) return 1;
    printf("not run: %s under AddressSanitizer: %s\n", what, why);
    return 0;
}

const char *zt_zshard_exe(void) {
    static char path[4096];
    const char *z = getenv("ZS_ZSHARD"), *d = getenv("ZS_BUILD_DIR");
    if (z && *z)
        snprintf(path, sizeof path, "%s", z);
    else
        snprintf(path, sizeof path, "%s/zshard", d ? d : ".");
    return path;
}

int zt_run(const char *cmd, char *buf, size_t cap) {
    char full[8192];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    ZT_REQUIRE(p != NULL, "popen failed for %s", cmd);
    size_t len = 0;
    if (cap) buf[0] = '\0';
    char tmp[4096];
    size_t got;
    while ((got = fread(tmp, 1, sizeof tmp, p)) > 0) {
        if (cap && len + 1 < cap) {
            size_t take = got < cap - 1 - len ? got : cap - 1 - len;
            memcpy(buf + len, tmp, take);
            len += take;
            buf[len] = '\0';
        }
    }
    int status = pclose(p);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

int zt_runf(char *buf, size_t cap, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return zt_run(cmd, buf, cap);
}

void zt_ckpt_hash(const char *ckpt, char out[17]) {
    static char buf[1 << 16];
    out[0] = '\0';
    int rc = zt_runf(buf, sizeof buf, "%s ckpt inspect %s", zt_zshard_exe(), ckpt);
    char *h = strstr(buf, "param_hash  ");
    ZT_CHECK(rc == 0 && h, "inspect %s: %s", ckpt, buf);
    if (h) snprintf(out, 17, "%.16s", h + 12);
}

double zt_gemm_round(int math, float x) {
    if (math == 0 || x == 0.0f || !isfinite(x)) return x;
    int e, bits = math == 1 ? 11 : 8;
    double f = frexp((double)x, &e) * ldexp(1.0, bits);
    return ldexp(math == 1 ? round(f) : rint(f), e - bits);
}
