/* Helpers shared by the CPU ops tests (test_ops.c, test_ops_state.c, test_ops_grad.c,
 * test_ops_llama.c):
 * buffers, central finite differences of a double-precision reference loss, the error
 * measure for accumulating outputs, and the causal softmax row of the attention references. static
 * inline, so each test compiles only what it uses. */
#ifndef ZS_OPSTEST_H
#define ZS_OPSTEST_H

#include "testutil.h"

#include <string.h>

static inline float *fbuf(size_t n) {
    return zt_malloc(n * sizeof(float));
}

static inline double *dbuf(size_t n) {
    return zt_malloc(n * sizeof(double));
}

static inline float *fcopy(const float *x, size_t n) {
    float *y = fbuf(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

static inline double *to_double(const float *x, size_t n) {
    double *y = dbuf(n);
    for (size_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}

static inline int bits_equal(const void *a, const void *b, size_t nbytes) {
    return memcmp(a, b, nbytes) == 0;
}

/* A scalar loss of double inputs, evaluated through ctx. */
typedef double (*loss_fn)(void *ctx);

/* Central differences d loss / d x[i] for all i. The step is 1e-5 (scaled by |x|): the
 * truncation error h^2 f''' ~ 1e-10 and the rounding error 2^-53 |L| / h ~ 1e-10 are both
 * four orders below the fp32 op errors the comparisons allow. */
static inline void fd_grad(loss_fn f, void *ctx, double *x, size_t n, double *g) {
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i], h = 1e-5 * fmax(1.0, fabs(x0));
        x[i] = x0 + h;
        double lp = f(ctx);
        x[i] = x0 - h;
        double lm = f(ctx);
        x[i] = x0;
        g[i] = (lp - lm) / (2 * h);
    }
}

/* max |(got - pre) - want| / max(1, |want|), NaN -> inf: the accumulated part of an
 * accumulating output (pre NULL for an overwritten one). The subtraction itself is exact to
 * ~2^-24 |pre|. */
static inline double acc_err(const float *got, const float *pre, const double *want, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d =
            fabs(((double)got[i] - (pre ? pre[i] : 0.0)) - want[i]) / fmax(1.0, fabs(want[i]));
        if (isnan(d)) return INFINITY;
        if (d > worst) worst = d;
    }
    return worst;
}

/* One query row of the naive causal attention references: s[t2] = exp(q.k(t2) scale - max)
 * for keys t2 = 0..t, key t2 at k + t2 * kstride (hs elements); returns sum(s), the softmax
 * denominator. Subtracting the max keeps exp in range; in double it changes nothing else. */
static inline double causal_scores(const double *q, const double *k, size_t kstride, int hs, int t,
                                   double scale, double *s) {
    double mx = -INFINITY, sum = 0;
    for (int t2 = 0; t2 <= t; t2++) {
        double d = 0;
        for (int i = 0; i < hs; i++)
            d += q[i] * k[(size_t)t2 * kstride + i];
        s[t2] = d * scale;
        mx = fmax(mx, s[t2]);
    }
    for (int t2 = 0; t2 <= t; t2++)
        sum += (s[t2] = exp(s[t2] - mx));
    return sum;
}

#endif
