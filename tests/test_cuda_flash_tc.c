/* Flash attention on tensor cores (the CUDA bf16 table's, src/backend/cuda/flash_tc_cuda.cu)
 * against an fp64 reference of exact attention (ctest label gpu): forward (output and lse) and
 * backward (dq, dk, dv overwriting NaN prefills), MHA and GQA, packed (GPT-2's qkv) and
 * separate layouts, with and without document masks, head sizes 16, 32 and 64, T from 1 to
 * 4096, rows not a multiple of the 64-row tiles, rows whose stride breaks 16-byte alignment.
 * The bf16-out forms (flash_attention_fwd16/bwd16) give the fp32 ops' bits, rounded (forward)
 * or from the widened out (backward), on the tensor cores and on the fp32 kernels' path; bwd16g
 * gives bwd16's gradients rounded, with its pair stores and without (an odd element); fwd16q
 * and bwd16q (bf16 q, k, v) give fwd16's and bwd16g's bits on the same values widened.
 *
 * The bound, element by element, from bf16's unit roundoff u = 2^-9 on every input of a product
 * (q, k, v, dO, and the probabilities P and score gradients dS the kernels round between their
 * products); fp32 accumulation on tensor cores is a thousand times smaller and is covered by a
 * relative 1e-5 of each sum of magnitudes:
 *  - a score s_ij = scale q_i.k_j moves by at most E_i = 2u scale max_j sum_d |q_id k_jd|, so
 *    p_ij = exp(s_ij - lse_i) by a relative 2 E_i (the row's normaliser moves with it);
 *  - out_i = sum_j P_ij v_j: sum_j P_ij |v_j| (2 E_i + 2u); lse_i: 2 E_i;
 *  - dP_ij = dO_i.v_j moves by F_ij = 2u sum_e |dO_ie v_je|; dS_ij = P_ij (dP_ij - D_i) by
 *    |dS err| = 2 E_i P_ij |dP_ij - D_i| + P_ij F_ij + u |dS_ij| (rounded for its products);
 *  - dv_j = sum_i P_ij dO_i: sum_i P_ij |dO_i| (2 E_i + 2u); dk_j = scale sum_i dS_ij q_i and
 *    dq_i = scale sum_j dS_ij k_j: scale sum (|dS err| + u |dS|) |q| (|k|).
 * Each bound is doubled. A wrong mask, tile edge or fragment moves results by O(P |v|), two
 * orders above it. The checks poison outputs first (NaN never passes), and the race checker
 * runs on this test. Exits 77 without a GPU. */
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

#define U16 (1.0 / 512.0) /* bf16 unit roundoff */

static const zs_ops *gpu;

static void *dev_up(const void *h, size_t nbytes) {
    void *d = NULL;
    ZT_OK(zs_cuda_alloc(ZS_MEM_WORKSPACE, nbytes ? nbytes : 1, "test buffer", &d));
    if (nbytes) ZT_OK(zs_cuda_memcpy_h2d(d, h, nbytes));
    return d;
}

static float *dev_down(const float *d, size_t n) {
    float *h = zt_malloc(n * sizeof(float) + 1);
    ZT_OK(gpu->sync(NULL));
    if (n) ZT_OK(zs_cuda_memcpy_d2h(h, d, n * sizeof(float)));
    return h;
}

static int check_bounded(const char *what, const float *got, const double *want,
                         const double *bound, size_t n) {
    size_t bad = 0, first = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        if (!(err <= bound[i])) { /* NaN fails */
            if (!bad) first = i;
            bad++;
        } else if (bound[i] > 0 && err / bound[i] > worst) {
            worst = err / bound[i];
        }
    }
    ZT_CHECK(bad == 0, "%s: %zu of %zu elements off, first [%zu]: %.9g, want %.9g within %.3g",
             what, bad, n, first, bad ? got[first] : 0.0, bad ? want[first] : 0.0,
             bad ? bound[first] : 0.0);
    if (!bad) printf("ok %s (worst error %.2f of its bound)\n", what, worst);
    return bad == 0;
}

/* Document starts: a new document at t > 0 with probability 1/8 (row 1 padded after m). */
static int32_t *make_seg(int B, int T) {
    int32_t *seg = zt_malloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        int m = b == 1 ? 1 + (int)zt_uniform(0, T) : T;
        for (int t = 0; t < T; t++) {
            int32_t *r = seg + (size_t)b * T;
            r[t] = t == 0 ? 0 : t >= m ? t : zt_uniform(0, 1) < 0.125 ? t : r[t - 1];
        }
    }
    return seg;
}

static void check(int B, int T, int NH, int NKV, int hs, int packed, int docs) {
    char what[160];
    snprintf(what, sizeof what, "B=%d T=%d NH=%d NKV=%d hs=%d%s%s", B, T, NH, NKV, hs,
             packed == 2 ? " packed, odd row stride"
             : packed    ? " packed"
                         : "",
             docs ? " documents" : "");
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs, BT = (size_t)B * T;
    /* packed == 2: a row stride of one float more, so rows are not 16-byte aligned and the
     * kernels take their scalar loads */
    size_t ldq = packed ? QD + 2 * KD + (packed == 2) : QD, ldkv = packed ? ldq : KD;
    size_t nq = BT * ldq, nk = packed ? 0 : BT * KD, no = BT * QD, nl = (size_t)B * NH * T;
    int32_t *seg = docs ? make_seg(B, T) : NULL;
    float *qb = zt_malloc(nq * 4 + 4), *kb0 = zt_malloc(nk * 4 + 4), *vb0 = zt_malloc(nk * 4 + 4);
    zt_fill_normal(qb, nq, 1.0f);
    zt_fill_normal(kb0, nk, 1.0f);
    zt_fill_normal(vb0, nk, 1.0f);
    const float *kb = packed ? qb + QD : kb0, *vb = packed ? qb + QD + KD : vb0;
    float *d_qb = dev_up(qb, nq * 4), *d_k0 = dev_up(kb0, nk * 4), *d_v0 = dev_up(vb0, nk * 4);
    const float *d_kb = packed ? d_qb + QD : d_k0, *d_vb = packed ? d_qb + QD + KD : d_v0;
    int32_t *d_seg = docs ? dev_up(seg, BT * sizeof(int32_t)) : NULL;
    float scale = 1.0f / sqrtf((float)hs);

    /* ---- the fp64 reference and the bounds ---- */
    double *ref_o = zt_malloc(no * 8), *bo = zt_malloc(no * 8), *ref_l = zt_malloc(nl * 8),
           *bl = zt_malloc(nl * 8);
    size_t ng = packed ? nq : nq + 2 * nk;
    size_t gk = packed ? QD : nq, gv = packed ? QD + KD : nq + nk; /* dk, dv in the gradient */
    float *g0 = zt_malloc(ng * 4 + 4), *dout = zt_malloc(no * 4 + 4);
    zt_poison(g0, ng); /* the backward overwrites its gradients: a NaN left over fails */
    zt_fill_normal(dout, no, 1.0f);
    double *ref_g = zt_malloc(ng * 8), *bg = zt_malloc(ng * 8);
    memset(ref_g, 0, ng * 8);
    memset(bg, 0, ng * 8);
    for (size_t r = 0; packed == 2 && r < BT; r++) { /* a row's spare float is not its to write */
        g0[r * ldq + ldq - 1] = 7.0f;
        ref_g[r * ldq + ldq - 1] = 7.0;
    }
    /* dk, dv of a key sum over query rows; their error sums go in mag_* first */
    double *mag = zt_malloc(ng * 8);
    memset(mag, 0, ng * 8);
    double *p = zt_malloc((size_t)T * 8);
    float *o32 = zt_malloc(no * 4 + 4), *lse32 = zt_malloc(nl * 4 + 4);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            for (int i = 0; i < T; i++) {
                const float *qi = qb + ((size_t)b * T + i) * ldq + (size_t)h * hs;
                int lo = seg ? seg[(size_t)b * T + i] : 0;
                double mx = -INFINITY, E = 0;
                for (int j = lo; j <= i; j++) {
                    const float *kj = kb + ((size_t)b * T + j) * ldkv + (size_t)g * hs;
                    double s = 0, sa = 0;
                    for (int d = 0; d < hs; d++) {
                        s += (double)qi[d] * kj[d];
                        sa += fabs((double)qi[d] * kj[d]);
                    }
                    p[j] = s * scale;
                    mx = p[j] > mx ? p[j] : mx;
                    E = sa > E ? sa : E;
                }
                E *= 2 * U16 * scale;
                double l = 0;
                for (int j = lo; j <= i; j++) {
                    p[j] = exp(p[j] - mx);
                    l += p[j];
                }
                size_t orow = ((size_t)b * T + i) * QD + (size_t)h * hs;
                size_t li = ((size_t)b * NH + h) * T + i;
                ref_l[li] = mx + log(l);
                bl[li] = 2 * (2 * E) + 1e-6 * fabs(ref_l[li]) + 1e-6;
                lse32[li] = (float)ref_l[li];
                for (int j = lo; j <= i; j++)
                    p[j] /= l;
                for (int e = 0; e < hs; e++) {
                    double o = 0, oa = 0;
                    for (int j = lo; j <= i; j++) {
                        double vj = vb[((size_t)b * T + j) * ldkv + (size_t)g * hs + e];
                        o += p[j] * vj;
                        oa += p[j] * fabs(vj);
                    }
                    ref_o[orow + e] = o;
                    o32[orow + e] = (float)o;
                    bo[orow + e] = 2 * oa * (2 * E + 2 * U16) + 1e-5 * oa + 1e-6;
                }
                /* backward of this row, with the reference's out and lse as given */
                const float *doi = dout + orow;
                double D = 0;
                for (int e = 0; e < hs; e++)
                    D += (double)doi[e] * o32[orow + e];
                size_t gq = ((size_t)b * T + i) * ldq + (size_t)h * hs;
                for (int j = lo; j <= i; j++) {
                    size_t kr = ((size_t)b * T + j) * ldkv + (size_t)g * hs;
                    const float *kj = kb + kr, *vj = vb + kr;
                    double dpj = 0, F = 0;
                    for (int e = 0; e < hs; e++) {
                        dpj += (double)doi[e] * vj[e];
                        F += fabs((double)doi[e] * vj[e]);
                    }
                    F *= 2 * U16;
                    double ds = p[j] * (dpj - D);
                    double dserr = 2 * E * p[j] * fabs(dpj - D) + p[j] * F + U16 * fabs(ds);
                    for (int e = 0; e < hs; e++) {
                        ref_g[gq + e] += scale * ds * kj[e];
                        mag[gq + e] += scale * (dserr + U16 * fabs(ds)) * fabs(kj[e]) +
                                       1e-5 * scale * fabs(ds * kj[e]);
                        ref_g[gk + kr + e] += scale * ds * qi[e];
                        mag[gk + kr + e] += scale * (dserr + U16 * fabs(ds)) * fabs(qi[e]) +
                                            1e-5 * scale * fabs(ds * qi[e]);
                        ref_g[gv + kr + e] += p[j] * doi[e];
                        mag[gv + kr + e] += p[j] * fabs(doi[e]) * (2 * E + 2 * U16 + 1e-5);
                    }
                }
            }
        }
    for (size_t i = 0; i < ng; i++)
        bg[i] += 2 * mag[i] + 1e-6;

    /* ---- forward on the GPU ---- */
    float *pz = zt_malloc(no * 4 + nl * 4 + 8);
    zt_poison(pz, no + nl);
    float *d_out = dev_up(pz, no * 4), *d_lse = dev_up(pz, nl * 4);
    ZT_OK(gpu->flash_attention_fwd(NULL, d_out, d_lse, d_qb, d_kb, d_vb, B, T, NH, NKV, hs,
                                   (int)ldq, (int)ldkv, d_seg));
    char w2[220];
    float *got = dev_down(d_out, no);
    snprintf(w2, sizeof w2, "flash tc fwd %s: out", what);
    check_bounded(w2, got, ref_o, bo, no);
    free(got);
    got = dev_down(d_lse, nl);
    snprintf(w2, sizeof w2, "flash tc fwd %s: lse", what);
    check_bounded(w2, got, ref_l, bl, nl);
    free(got);

    /* ---- backward on the GPU, from the reference's out and lse ---- */
    float *d_g = dev_up(g0, ng * 4), *d_o = dev_up(o32, no * 4), *d_l = dev_up(lse32, nl * 4);
    float *d_delta = dev_up(pz, nl * 4), *d_dout = dev_up(dout, no * 4);
    ZT_OK(gpu->flash_attention_bwd(NULL, d_g, d_g + gk, d_g + gv, d_delta, d_dout, d_qb, d_kb, d_vb,
                                   d_o, d_l, B, T, NH, NKV, hs, (int)ldq, (int)ldkv, d_seg));
    got = dev_down(d_g, ng);
    snprintf(w2, sizeof w2, "flash tc bwd %s: dq | dk | dv (overwritten)", what);
    check_bounded(w2, got, ref_g, bg, ng);
    free(got);

    void *dbufs[] = {d_qb, d_k0, d_v0, d_seg, d_out, d_lse, d_g, d_o, d_l, d_delta, d_dout};
    for (size_t i = 0; i < sizeof dbufs / sizeof dbufs[0]; i++)
        zs_cuda_free(dbufs[i]);
    void *hbufs[] = {seg,  qb,    kb0, vb0, ref_o, bo,  ref_l, bl, g0,
                     dout, ref_g, bg,  mag, p,     o32, lse32, pz};
    for (size_t i = 0; i < sizeof hbufs / sizeof hbufs[0]; i++)
        free(hbufs[i]);
}

static void *dev_down_bytes(const void *d, size_t nbytes) {
    void *h = zt_malloc(nbytes + 1);
    ZT_OK(gpu->sync(NULL));
    if (nbytes) ZT_OK(zs_cuda_memcpy_d2h(h, d, nbytes));
    return h;
}

/* flash_attention_fwd16 and bwd16 (a bf16 out, ops.h) against the fp32 ops of the same table
 * on the same inputs, bit for bit: the forward's out rounded once (zs_f32_to_bf16) and its lse
 * unchanged; the backward's dq | dk | dv and delta from the bf16 out equal to the fp32 op's
 * given that out widened. off moves the bf16 out by that many elements (1: not 8-byte aligned,
 * which the fp32 kernels take; the tensor cores refuse it, check_out16_refused). */
static void check_out16(int B, int T, int NH, int NKV, int hs, int packed, int docs, int off) {
    char what[160];
    snprintf(what, sizeof what, "%s table, B=%d T=%d NH=%d NKV=%d hs=%d%s%s%s",
             gpu->gemm_math == ZS_MATH_BF16 ? "bf16" : "fp32", B, T, NH, NKV, hs,
             packed ? " packed" : "", docs ? " documents" : "", off ? " unaligned out" : "");
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs, BT = (size_t)B * T;
    size_t ldq = packed ? QD + 2 * KD : QD, ldkv = packed ? ldq : KD;
    size_t nq = BT * ldq, nk = packed ? 0 : BT * KD, no = BT * QD, nl = (size_t)B * NH * T;
    size_t ng = packed ? nq : nq + 2 * nk;
    size_t gk = packed ? QD : nq, gv = packed ? QD + KD : nq + nk;
    int32_t *seg = docs ? make_seg(B, T) : NULL;
    float *h = zt_malloc((nq + 2 * nk + no) * 4 + 4);
    zt_fill_normal(h, nq + 2 * nk + no, 1.0f);
    float *d_in = dev_up(h, (nq + 2 * nk + no) * 4), *d_dout = d_in + nq + 2 * nk;
    const float *d_q = d_in, *d_k = packed ? d_in + QD : d_in + nq,
                *d_v = packed ? d_in + QD + KD : d_in + nq + nk;
    int32_t *d_seg = docs ? dev_up(seg, BT * sizeof(int32_t)) : NULL;
    float *pz = zt_malloc((ng + no + nl) * 4 + 4);
    zt_poison(pz, ng + no + nl);
    float *d_o = dev_up(pz, no * 4), *d_l = dev_up(pz, nl * 4), *d_l16 = dev_up(pz, nl * 4);
    zs_bf16 *d_o16b = dev_up(pz, (no + off) * 2), *d_o16 = d_o16b + off;
    ZT_OK(gpu->flash_attention_fwd(NULL, d_o, d_l, d_q, d_k, d_v, B, T, NH, NKV, hs, (int)ldq,
                                   (int)ldkv, d_seg));
    ZT_OK(gpu->flash_attention_fwd16(NULL, d_o16, d_l16, d_q, d_k, d_v, B, T, NH, NKV, hs, (int)ldq,
                                     (int)ldkv, d_seg));
    float *o = dev_down(d_o, no), *l = dev_down(d_l, nl), *l16 = dev_down(d_l16, nl);
    zs_bf16 *o16 = dev_down_bytes(d_o16, no * 2);
    size_t bad = 0;
    for (size_t i = 0; i < no; i++)
        bad += o16[i].bits != zs_f32_to_bf16(o[i]).bits;
    ZT_CHECK(bad == 0, "fwd16 %s: %zu of %zu outputs not the fp32 out rounded", what, bad, no);
    ZT_CHECK(!memcmp(l, l16, nl * 4), "fwd16 %s: lse differs from the fp32 op's", what);

    /* the backward: fp32 op given the widened out, the bf16 op given out16 */
    float *wide = zt_malloc(no * 4 + 4);
    for (size_t i = 0; i < no; i++)
        wide[i] = zs_bf16_to_f32(o16[i]);
    float *d_w = dev_up(wide, no * 4), *d_ga = dev_up(pz, ng * 4), *d_gb = dev_up(pz, ng * 4);
    float *d_da = dev_up(pz, nl * 4), *d_db = dev_up(pz, nl * 4);
    ZT_OK(gpu->flash_attention_bwd(NULL, d_ga, d_ga + gk, d_ga + gv, d_da, d_dout, d_q, d_k, d_v,
                                   d_w, d_l, B, T, NH, NKV, hs, (int)ldq, (int)ldkv, d_seg));
    ZT_OK(gpu->flash_attention_bwd16(NULL, d_gb, d_gb + gk, d_gb + gv, d_db, d_dout, d_q, d_k, d_v,
                                     d_o16, d_l, B, T, NH, NKV, hs, (int)ldq, (int)ldkv, d_seg));
    float *ga = dev_down(d_ga, ng), *gb = dev_down(d_gb, ng), *da = dev_down(d_da, nl),
          *db = dev_down(d_db, nl);
    ZT_CHECK(!memcmp(ga, gb, ng * 4) && !memcmp(da, db, nl * 4),
             "bwd16 %s: dq | dk | dv or delta differ from the fp32 op's on the widened out", what);
    ZT_CHECK(!gpu->flash_attention_bwd16g == !gpu->gemm_linear_bwd,
             "%s: bf16 attention gradients exactly where gemm_linear_bwd reads them", what);
    /* bwd16g: dq | dk | dv in bf16, bwd16's rounded; at an odd element (goff 1) its pair stores
     * fall back to single ones */
    for (int goff = 0; gpu->flash_attention_bwd16g && goff < 2; goff++) {
        zs_bf16 *d_gc = dev_up(pz, (ng + 1) * 2), *g = d_gc + goff;
        ZT_OK(gpu->flash_attention_bwd16g(NULL, g, g + gk, g + gv, d_db, d_dout, d_q, d_k, d_v,
                                          d_o16, d_l, B, T, NH, NKV, hs, (int)ldq, (int)ldkv,
                                          d_seg));
        zs_bf16 *gc = dev_down_bytes(d_gc, (ng + 1) * 2);
        float *dc = dev_down(d_db, nl);
        bad = 0;
        for (size_t i = 0; i < ng; i++) /* every element written (the poison is NaN) */
            bad += gc[goff + i].bits != zs_f32_to_bf16(gb[i]).bits;
        ZT_CHECK(bad == 0 && !memcmp(da, dc, nl * 4),
                 "bwd16g %s%s: %zu of %zu gradients not bwd16's rounded, or delta differs", what,
                 goff ? " odd" : "", bad, ng);
        zs_cuda_free(d_gc);
        free(gc), free(dc);
    }
    printf("out16 %s: bit for bit\n", what);
    void *dbufs[] = {d_in, d_seg, d_o, d_l, d_l16, d_o16b, d_w, d_ga, d_gb, d_da, d_db};
    for (size_t i = 0; i < sizeof dbufs / sizeof dbufs[0]; i++)
        zs_cuda_free(dbufs[i]);
    void *hbufs[] = {seg, h, pz, o, l, l16, o16, wide, ga, gb, da, db};
    for (size_t i = 0; i < sizeof hbufs / sizeof hbufs[0]; i++)
        free(hbufs[i]);
}

/* flash_attention_fwd16q and bwd16q (bf16 q, k, v: GPT-2's kept qkv, and bwd16q's bf16 dO;
 * ops.h) against fwd16 and bwd16g given the same values widened, bit for bit: out, lse, delta and
 * dq | dk | dv. off moves the bf16 inputs by that many elements (1: rows not 8-byte aligned, the
 * scalar loads). */
static void check_qkv16(int B, int T, int NH, int NKV, int hs, int packed, int docs, int off) {
    char what[160];
    snprintf(what, sizeof what, "B=%d T=%d NH=%d NKV=%d hs=%d%s%s%s", B, T, NH, NKV, hs,
             packed ? " packed" : "", docs ? " documents" : "", off ? " unaligned" : "");
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs, BT = (size_t)B * T;
    size_t ldq = packed ? QD + 2 * KD : QD, ldkv = packed ? ldq : KD;
    size_t nq = BT * ldq, nk = packed ? 0 : BT * KD, no = BT * QD, nl = (size_t)B * NH * T;
    size_t ni = nq + 2 * nk, ng = ni;
    size_t gk = packed ? QD : nq, gv = packed ? QD + KD : nq + nk;
    int32_t *seg = docs ? make_seg(B, T) : NULL;
    float *h = zt_malloc((ni + no) * 4 + 4);
    zs_bf16 *h16 = zt_malloc((ni + no + off) * 2 + 2);
    zt_fill_normal(h, ni + no, 1.0f);
    for (size_t i = 0; i < ni + no; i++) { /* q, k, v and dO bf16 values, and their bf16 copy */
        h16[off + i] = zs_f32_to_bf16(h[i]);
        h[i] = zs_bf16_to_f32(h16[off + i]);
    }
    float *d_in = dev_up(h, (ni + no) * 4), *d_dout = d_in + ni;
    zs_bf16 *d_in16b = dev_up(h16, (ni + no + off) * 2), *d_in16 = d_in16b + off;
    int32_t *d_seg = docs ? dev_up(seg, BT * sizeof(int32_t)) : NULL;
    float *pz = zt_malloc((ng + no + nl) * 4 + 4);
    zt_poison(pz, ng + no + nl);
    float *d_la = dev_up(pz, nl * 4), *d_lb = dev_up(pz, nl * 4), *d_da = dev_up(pz, nl * 4),
          *d_db = dev_up(pz, nl * 4);
    zs_bf16 *d_oa = dev_up(pz, no * 2), *d_ob = dev_up(pz, no * 2), *d_ga = dev_up(pz, ng * 2),
            *d_gb = dev_up(pz, ng * 2);
    const size_t ko = packed ? QD : nq, vo = packed ? QD + KD : nq + nk;
    ZT_OK(gpu->flash_attention_fwd16(NULL, d_oa, d_la, d_in, d_in + ko, d_in + vo, B, T, NH, NKV,
                                     hs, (int)ldq, (int)ldkv, d_seg));
    ZT_OK(gpu->flash_attention_fwd16q(NULL, d_ob, d_lb, d_in16, d_in16 + ko, d_in16 + vo, B, T, NH,
                                      NKV, hs, (int)ldq, (int)ldkv, d_seg));
    ZT_OK(gpu->flash_attention_bwd16g(NULL, d_ga, d_ga + gk, d_ga + gv, d_da, d_dout, d_in,
                                      d_in + ko, d_in + vo, d_oa, d_la, B, T, NH, NKV, hs, (int)ldq,
                                      (int)ldkv, d_seg));
    ZT_OK(gpu->flash_attention_bwd16q(NULL, d_gb, d_gb + gk, d_gb + gv, d_db, d_in16 + ni, d_in16,
                                      d_in16 + ko, d_in16 + vo, d_ob, d_lb, B, T, NH, NKV, hs,
                                      (int)ldq, (int)ldkv, d_seg));
    void *oa = dev_down_bytes(d_oa, no * 2), *ob = dev_down_bytes(d_ob, no * 2);
    void *la = dev_down_bytes(d_la, nl * 4), *lb = dev_down_bytes(d_lb, nl * 4);
    void *da = dev_down_bytes(d_da, nl * 4), *db = dev_down_bytes(d_db, nl * 4);
    void *ga = dev_down_bytes(d_ga, ng * 2), *gb = dev_down_bytes(d_gb, ng * 2);
    ZT_CHECK(!memcmp(oa, ob, no * 2) && !memcmp(la, lb, nl * 4),
             "fwd16q %s: out or lse differ from fwd16's on the widened values", what);
    ZT_CHECK(!memcmp(ga, gb, ng * 2) && !memcmp(da, db, nl * 4),
             "bwd16q %s: dq | dk | dv or delta differ from bwd16g's on the widened values", what);
    printf("qkv16 %s: bit for bit\n", what);
    void *dbufs[] = {d_in, d_in16b, d_seg, d_la, d_lb, d_da, d_db, d_oa, d_ob, d_ga, d_gb};
    for (size_t i = 0; i < sizeof dbufs / sizeof dbufs[0]; i++)
        zs_cuda_free(dbufs[i]);
    void *hbufs[] = {seg, h, h16, pz, oa, ob, la, lb, da, db, ga, gb};
    for (size_t i = 0; i < sizeof hbufs / sizeof hbufs[0]; i++)
        free(hbufs[i]);
}

/* bf16 q, k, v are the tensor cores' only: the head sizes they take are the ones
 * flash_qkv16_hs accepts, another is refused naming it, and the fp32 table has none. */
static void check_qkv16_refused(const zs_ops *f32) {
    ZT_CHECK(gpu->flash_qkv16_hs(16) && gpu->flash_qkv16_hs(32) && gpu->flash_qkv16_hs(64) &&
                 !gpu->flash_qkv16_hs(24) && !gpu->flash_qkv16_hs(128),
             "flash_qkv16_hs: head sizes 16, 32 and 64 only");
    char *z = zt_malloc(4096);
    memset(z, 0, 4096);
    zs_bf16 *d = dev_up(z, 4096);
    float *d_l = dev_up(z, 64);
    zs_status st =
        gpu->flash_attention_fwd16q(NULL, d, d_l, d, d + 24, d + 48, 1, 2, 1, 1, 24, 72, 72, NULL);
    ZT_CHECK(st == ZS_ERR_INVALID && strstr(zs_last_error(), "head size 24"),
             "fwd16q: head size 24 refused naming it (%s)", zs_last_error());
    st = gpu->flash_attention_bwd16q(NULL, d, d + 24, d + 48, d_l, d, d, d + 24, d + 48, d, d_l, 1,
                                     2, 1, 1, 24, 72, 72, NULL);
    ZT_CHECK(st == ZS_ERR_INVALID && strstr(zs_last_error(), "head size 24"),
             "bwd16q: head size 24 refused naming it (%s)", zs_last_error());
    ZT_CHECK(!f32->flash_qkv16_hs && !f32->flash_attention_fwd16q && !f32->flash_attention_bwd16q,
             "the fp32 table: no bf16 q, k, v");
    zs_cuda_free(d), zs_cuda_free(d_l);
    free(z);
}

/* The tensor-core forwards' stores are 8-byte pieces: an out that is not 8-byte aligned is
 * refused with a message naming it, on both forms, before any launch. */
static void check_out16_refused(void) {
    float *h = zt_malloc(3 * 64 * 4 * 2);
    zt_fill_normal(h, 3 * 64 * 2, 1.0f);
    float *d_q = dev_up(h, 3 * 64 * 2 * 4), *d_o = dev_up(h, 64 * 2 * 4 + 8), *d_l = dev_up(h, 8);
    zs_status st = gpu->flash_attention_fwd16(NULL, (zs_bf16 *)d_o + 1, d_l, d_q, d_q + 64,
                                              d_q + 128, 1, 2, 1, 1, 64, 192, 192, NULL);
    ZT_CHECK(st == ZS_ERR_INVALID && strstr(zs_last_error(), "not 8-byte aligned"),
             "fwd16 on tensor cores: an unaligned out refused naming it (%s)", zs_last_error());
    st = gpu->flash_attention_fwd(NULL, d_o + 1, d_l, d_q, d_q + 64, d_q + 128, 1, 2, 1, 1, 64, 192,
                                  192, NULL);
    ZT_CHECK(st == ZS_ERR_INVALID && strstr(zs_last_error(), "not 8-byte aligned"),
             "fwd on tensor cores: an unaligned out refused naming it (%s)", zs_last_error());
    zs_cuda_free(d_q), zs_cuda_free(d_o), zs_cuda_free(d_l);
    free(h);
}

int main(void) {
    zt_init("cuda_flash_tc");
    zt_gpu_require();
    const zs_ops *base = NULL;
    const zs_device *dev = NULL;
    ZT_OK(zs_backend_select("cuda", &base, &dev));
    ZT_OK(zs_cuda_set_device(0));
    gpu = base->with_math(ZS_MATH_BF16);
    for (int docs = 0; docs < 2; docs++) {
        check(2, 70, 4, 4, 16, 1, docs);  /* GPT-2's packed qkv, rows past one tile */
        check(2, 150, 6, 2, 32, 0, docs); /* GQA */
        check(1, 130, 4, 1, 64, 0, docs); /* one kv head */
    }
    check(1, 1, 2, 2, 64, 0, 0);    /* a single row */
    check(1, 64, 2, 2, 64, 1, 0);   /* exactly one tile */
    check(1, 4096, 2, 1, 64, 0, 1); /* long: 64 tiles, documents across many */
    check(1, 2048, 1, 1, 64, 1, 0); /* long, one document: every tile of the causal triangle */
    check(1, 300, 4, 2, 64, 2, 1);  /* rows not 16-byte aligned: scalar loads */
    /* the bf16 out: tensor cores at each head size, the fp32 kernels' bf16 forms for a head
     * size the tensor cores do not take, an unaligned out refused, and the fp32 table (with an
     * unaligned out) */
    check_out16(2, 70, 4, 4, 16, 1, 1, 0);
    check_out16(2, 150, 6, 2, 32, 0, 0, 0);
    check_out16(1, 130, 4, 1, 64, 0, 1, 0);
    check_out16(1, 97, 4, 2, 24, 0, 1, 0);
    check_out16_refused();
    /* bf16 q, k, v: each head size, GQA, documents, the packed layout at T past the kv split,
     * and rows not 8-byte aligned */
    check_qkv16(2, 70, 4, 4, 16, 1, 1, 0);
    check_qkv16(2, 150, 6, 2, 32, 0, 0, 0);
    check_qkv16(1, 130, 4, 1, 64, 0, 1, 0);
    check_qkv16(1, 1100, 2, 2, 64, 1, 1, 0);
    check_qkv16(1, 97, 2, 2, 64, 1, 0, 1);
    check_qkv16_refused(base->with_math(ZS_MATH_FP32));
    gpu = base->with_math(ZS_MATH_FP32);
    check_out16(2, 70, 4, 4, 16, 1, 1, 0);
    check_out16(1, 70, 2, 2, 64, 0, 0, 1);
    return zt_finish();
}
