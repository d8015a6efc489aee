/* The harness of the CUDA ops tests (cuda_ops_util.h): the tables' setup, the pool of host and
 * device buffers, and the comparisons of a device result with the CPU's. */
#include "cuda_ops_util.h"

#include "backend/cuda_device.h"
#include "backend/device.h"

#include <string.h>

const zs_ops *co_cpu, *co_gpu;
int co_fake;

void co_init(const char *name) {
    zt_init(name);
    co_cpu = zs_ops_cpu();
    const char *f = getenv("ZS_TEST_CUDA_FAKE");
    co_fake = f && *f && strcmp(f, "0") != 0;
    if (co_fake) {
        printf("%s: ZS_TEST_CUDA_FAKE: CPU table stands in for CUDA (harness check only)\n", name);
        co_gpu = zs_ops_cpu();
    } else {
        zt_gpu_require();
        const zs_device *dev = NULL;
        /* The CUDA tables, and the device ledger as the one the checks read and cap. */
        ZT_OK(zs_backend_select("cuda", &co_gpu, &dev));
        ZT_REQUIRE(co_gpu != NULL, "zs_ops_cuda() is NULL in a CUDA build");
        ZT_OK(zs_cuda_set_device(0));
    }
}

/* ---- buffers ------------------------------------------------------------------------ */

#define MAX_BUFS 256
static void *g_dev[MAX_BUFS], *g_host[MAX_BUFS];
static int g_ndev, g_nhost;

void *co_hbuf(size_t nbytes) {
    ZT_REQUIRE(g_nhost < MAX_BUFS, "too many host buffers in one check");
    return g_host[g_nhost++] = zt_malloc(nbytes);
}

float *co_hf(size_t n) {
    return co_hbuf(n * sizeof(float));
}

void *co_dbuf(size_t nbytes) {
    void *p = NULL;
    ZT_REQUIRE(g_ndev < MAX_BUFS, "too many device buffers in one check");
    if (co_fake)
        p = zt_malloc(nbytes ? nbytes : 1);
    else
        ZT_OK(zs_cuda_alloc(ZS_MEM_WORKSPACE, nbytes ? nbytes : 1, "test buffer", &p));
    return g_dev[g_ndev++] = p;
}

void co_h2d(void *d, const void *h, size_t nbytes) {
    if (co_fake)
        memcpy(d, h, nbytes);
    else
        ZT_OK(zs_cuda_memcpy_h2d(d, h, nbytes));
}

void co_d2h(void *h, const void *d, size_t nbytes) {
    if (co_fake)
        memcpy(h, d, nbytes);
    else
        ZT_OK(zs_cuda_memcpy_d2h(h, d, nbytes));
}

void co_release(void) {
    for (int i = 0; i < g_ndev; i++)
        if (co_fake)
            free(g_dev[i]);
        else
            zs_cuda_free(g_dev[i]);
    for (int i = 0; i < g_nhost; i++)
        free(g_host[i]);
    g_ndev = g_nhost = 0;
}

float *co_up(const float *h, size_t n) {
    float *d = co_dbuf(n * sizeof(float));
    co_h2d(d, h, n * sizeof(float));
    return d;
}

int32_t *co_upi(const int32_t *h, size_t n) {
    int32_t *d = co_dbuf(n * sizeof(int32_t));
    co_h2d(d, h, n * sizeof(int32_t));
    return d;
}

float *co_down(const float *d, size_t n) {
    float *h = co_hf(n);
    ZT_OK(co_gpu->sync(NULL));
    co_d2h(h, d, n * sizeof(float));
    return h;
}

float *co_randn(size_t n, float std) {
    float *x = co_hf(n);
    zt_fill_normal(x, n, std);
    return x;
}

float *co_poisoned(size_t n) {
    float *x = co_hf(n);
    zt_poison(x, n);
    return x;
}

float *co_clone(const float *x, size_t n) {
    float *y = co_hf(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* ---- comparisons -------------------------------------------------------------------- */

void co_expect_bits(const char *what, const float *d, const float *want, size_t n) {
    float *got = co_down(d, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            if (!bad) first = i;
            bad++;
        }
    ZT_CHECK(bad == 0, "%s: %zu of %zu elements differ from the CPU, first at %zu: %.9g vs %.9g",
             what, bad, n, first, bad ? (double)got[first] : 0.0, bad ? (double)want[first] : 0.0);
}

void co_expect_rounded(const char *what, const zs_bf16 *d, const float *want, size_t n) {
    zs_bf16 *got = co_hbuf(n * sizeof *got);
    size_t bad = 0;
    co_d2h(got, d, n * sizeof *got);
    for (size_t i = 0; i < n; i++)
        bad += got[i].bits != zs_f32_to_bf16(want[i]).bits;
    ZT_CHECK(bad == 0, "%s: %zu of %zu elements are not the CPU's values rounded", what, bad, n);
}

void co_expect_close(const char *what, const float *d, const float *want, size_t n, double tol) {
    float *got = co_down(d, n);
    double err = zt_max_err_ff(got, want, n);
    ZT_CHECK(err <= tol, "%s: max error %.3g > %.3g", what, err, tol);
}

void co_expect_bounded(const char *what, const float *d, const float *want, const double *bound,
                       size_t n) {
    float *got = co_down(d, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (bound[i] == 0 ? memcmp(&got[i], &want[i], sizeof(float)) != 0
                          : !(fabs((double)got[i] - (double)want[i]) <= bound[i])) {
            if (!bad) first = i;
            bad++;
        }
    ZT_CHECK(bad == 0,
             "%s: %zu of %zu elements outside their bound, first at %zu: %.9g vs %.9g "
             "(bound %.3g)",
             what, bad, n, first, bad ? (double)got[first] : 0.0, bad ? (double)want[first] : 0.0,
             bad ? bound[first] : 0.0);
}
