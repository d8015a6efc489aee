/* Exporting a checkpoint's master parameters, streamed tensor by tensor so the peak memory
 * is about one tensor (only transposed ones are held whole; the others go through in frame-
 * sized chunks): one safetensors file in Hugging Face GPT-2 layout, or an llm.c model file.
 * Output goes to OUT.tmp and is renamed into place only when complete. */
#include "ckpt/convert.h"

#include "ckpt/json.h"
#include "core/bf16.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_PER_PASS 64

typedef struct out_stream {
    int fd;
    const char *path;
    zs_dtype dt;
    void *conv;         /* converted chunk */
    const char *tensor; /* being written, for messages */
} out_stream;

/* IEEE half, round to nearest even; 0 when a finite x is beyond the half range (65504, and
 * what rounds past it), which the export refuses rather than write an infinity. */
static int f32_to_f16(float f, uint16_t *out) {
    uint32_t x = zs_f32_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { /* inf, NaN: kept */
        *out = (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
        return 1;
    }
    if (ax >= 0x477ff000u) return 0; /* >= 65520 rounds to infinity */
    if (ax < 0x38800000u) {          /* below 2^-14: a subnormal half */
        *out = (uint16_t)(sign | (uint32_t)lrintf(fabsf(f) * 0x1p24f));
        return 1;
    }
    uint32_t h = ((ax >> 23) - 112) << 10 | (ax & 0x7fffffu) >> 13, rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    *out = (uint16_t)(sign | h);
    return 1;
}

/* Convert n fp32 values to the output dtype and write them. */
static zs_status emit(out_stream *o, const float *x, size_t n) {
    if (o->dt == ZS_DTYPE_F32) return zs_out_write(o->fd, o->path, x, n * 4);
    uint16_t *b = o->conv;
    if (o->dt == ZS_DTYPE_F16) {
        for (size_t i = 0; i < n; i++)
            if (!f32_to_f16(x[i], &b[i]))
                return zs_error(ZS_ERR_INVALID,
                                "%s: tensor %s: value %g does not fit float16 (largest 65504); "
                                "export as f32 or bf16",
                                o->path, o->tensor ? o->tensor : "?", (double)x[i]);
    } else {
        for (size_t i = 0; i < n; i++)
            b[i] = zs_f32_to_bf16(x[i]).bits;
    }
    return zs_out_write(o->fd, o->path, b, n * 2);
}

/* Stream `count` leading elements of layout tensor t, transposed ([O, I] -> [I, O]) if asked. */
static zs_status stream_tensor(zs_ckpt_reader *r, out_stream *o, const zs_tensor_desc *t,
                               int64_t count, int transpose, float *chunk, int64_t chunk_n,
                               float **whole, int64_t *whole_n) {
    zs_status st = ZS_OK;
    if (!transpose) {
        for (int64_t i = 0; i < count; i += chunk_n) {
            int64_t n = count - i < chunk_n ? count - i : chunk_n;
            ZS_CHECK(zs_ckpt_read(r, t->unit, ZS_CKPT_MASTER, t->offset + i, n, chunk));
            ZS_CHECK(emit(o, chunk, (size_t)n));
        }
        return ZS_OK;
    }
    int64_t O = t->shape[0], I = t->shape[1];
    if (*whole_n < t->count) {
        free(*whole);
        *whole = malloc((size_t)t->count * sizeof **whole);
        ZS_REQUIRE(*whole, ZS_ERR_OOM, "%s: out of memory for tensor %s", o->path, t->name);
        *whole_n = t->count;
    }
    ZS_CHECK(zs_ckpt_read(r, t->unit, ZS_CKPT_MASTER, t->offset, t->count, *whole));
    /* Output row i is input column i; ROWS_PER_PASS rows at a time keep reads cache-friendly
     * and the staging buffer small (it is `chunk`, at least ROWS_PER_PASS x O values). */
    for (int64_t i0 = 0; i0 < I; i0 += ROWS_PER_PASS) {
        int64_t rows = I - i0 < ROWS_PER_PASS ? I - i0 : ROWS_PER_PASS;
        ZS_ASSERT(rows * O <= chunk_n);
        for (int64_t oo = 0; oo < O; oo++) {
            const float *src = *whole + oo * I + i0;
            for (int64_t k = 0; k < rows; k++)
                chunk[k * O + oo] = src[k];
        }
        ZS_CHECK(emit(o, chunk, (size_t)(rows * O)));
    }
fail:
    return st;
}

/* Chunk buffers: one frame, and wide enough for ROWS_PER_PASS rows of any transposed
 * tensor. */
static zs_status alloc_chunks(const zs_layout *l, int64_t block, const char *path, float **chunk,
                              int64_t *chunk_n, void **conv) {
    int64_t n = block;
    for (int i = 0; i < l->n_tensors; i++)
        if (l->tensors[i].ndim == 2 && l->tensors[i].shape[0] * ROWS_PER_PASS > n)
            n = l->tensors[i].shape[0] * ROWS_PER_PASS;
    *chunk = malloc((size_t)n * sizeof **chunk);
    *conv = malloc((size_t)n * 2);
    *chunk_n = n;
    if (!*chunk || !*conv) return zs_error(ZS_ERR_OOM, "%s: out of memory", path);
    return ZS_OK;
}

zs_status zs_st_export(zs_ckpt_reader *r, const char *out, zs_dtype dt) {
    return zs_st_export_range(r, out, dt, 0, zs_ckpt_reader_manifest(r)->layout.n_tensors);
}

zs_status zs_st_export_range(zs_ckpt_reader *r, const char *out, zs_dtype dt, int t0, int t1) {
    zs_status st = ZS_OK;
    const zs_manifest *m = zs_ckpt_reader_manifest(r);
    const zs_layout *l = &m->layout;
    const zs_model_config *c = &m->info.model;
    zs_ext_tensor *map = NULL;
    char *hdr = NULL, tmp[4096];
    size_t hlen = 0;
    float *chunk = NULL, *whole = NULL;
    int64_t chunk_n = 0, whole_n = 0;
    out_stream o = {-1, out, dt, NULL, NULL};
    ZS_REQUIRE(dt == ZS_DTYPE_F32 || dt == ZS_DTYPE_BF16 || dt == ZS_DTYPE_F16, ZS_ERR_INVALID,
               "export: dtype must be f32, bf16 or f16");
    ZS_REQUIRE(t0 >= 0 && t0 < t1 && t1 <= l->n_tensors, ZS_ERR_INTERNAL,
               "export: tensors [%d, %d)", t0, t1);
    map = calloc((size_t)l->n_tensors, sizeof *map);
    ZS_REQUIRE(map, ZS_ERR_OOM, "%s: out of memory", out);
    ZS_CHECK(zs_ext_map(l, c, map));

    /* The header first: every shape is known, so offsets are too. */
    FILE *f = open_memstream(&hdr, &hlen);
    ZS_REQUIRE(f, ZS_ERR_OOM, "%s: out of memory", out);
    fprintf(f, "{\"__metadata__\":{\"format\":\"pt\",\"zshard.arch\":\"%s\",\"zshard.model\":",
            zs_ckpt_arch_name(c->arch));
    zs_json_write_string(f, c->name);
    fprintf(f,
            ",\"zshard.n_layer\":\"%d\",\"zshard.n_head\":\"%d\",\"zshard.n_kv_head\":\"%d\","
            "\"zshard.n_embd\":\"%d\",\"zshard.ffn_hidden\":\"%d\",\"zshard.max_seq\":\"%d\","
            "\"zshard.vocab\":\"%d\",\"zshard.step\":\"%lld\"",
            c->n_layer, c->n_head, c->n_kv_head, c->n_embd, c->ffn_hidden, c->max_seq, c->vocab,
            (long long)m->info.step);
    if (c->arch == ZS_ARCH_LLAMA)
        fprintf(f, ",\"zshard.rope_theta\":\"%.9g\",\"zshard.norm_eps\":\"%.9g\"",
                (double)c->rope_theta, (double)c->norm_eps);
    fputc('}', f);
    uint64_t at = 0, es = dt == ZS_DTYPE_F32 ? 4 : 2;
    for (int i = t0; i < t1; i++) {
        const zs_ext_tensor *x = &map[i];
        uint64_t n = (uint64_t)x->hf_shape[0] * (uint64_t)(x->ndim == 2 ? x->hf_shape[1] : 1);
        fprintf(f, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", x->hf_name,
                dt == ZS_DTYPE_F32   ? "F32"
                : dt == ZS_DTYPE_F16 ? "F16"
                                     : "BF16",
                (long long)x->hf_shape[0]);
        if (x->ndim == 2) fprintf(f, ",%lld", (long long)x->hf_shape[1]);
        fprintf(f, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                (unsigned long long)(at + n * es));
        at += n * es;
    }
    fputc('}', f);
    /* Pad with spaces so the data section starts 8-byte aligned, as the reference writer. */
    while ((ftell(f) + 8) % 8)
        fputc(' ', f);
    int bad = fclose(f);
    ZS_REQUIRE(!bad, ZS_ERR_OOM, "%s: out of memory", out);

    ZS_CHECK(alloc_chunks(l, m->info.block_elems, out, &chunk, &chunk_n, &o.conv));
    ZS_CHECK(zs_out_open(out, tmp, sizeof tmp, &o.fd));
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    ZS_CHECK(zs_out_write(o.fd, out, len8, 8));
    ZS_CHECK(zs_out_write(o.fd, out, hdr, hlen));
    for (int i = t0; i < t1; i++) {
        const zs_tensor_desc *t = &l->tensors[i];
        int64_t count = map[i].rows * (t->ndim == 2 ? t->shape[1] : 1);
        o.tensor = map[i].hf_name;
        ZS_CHECK(
            stream_tensor(r, &o, t, count, map[i].transpose, chunk, chunk_n, &whole, &whole_n));
    }
    ZS_CHECK(zs_out_commit(o.fd, tmp, out));
    o.fd = -1;
fail:
    if (o.fd >= 0) zs_out_abort(o.fd, tmp);
    free(map);
    free(hdr);
    free(chunk);
    free(whole);
    free(o.conv);
    return st;
}

zs_status zs_llmc_export(zs_ckpt_reader *r, const char *out, zs_dtype dt) {
    zs_status st = ZS_OK;
    const zs_manifest *m = zs_ckpt_reader_manifest(r);
    const zs_layout *l = &m->layout;
    const zs_model_config *c = &m->info.model;
    int *order = NULL;
    float *chunk = NULL, *whole = NULL;
    int64_t chunk_n = 0, whole_n = 0;
    char tmp[4096];
    out_stream o = {-1, out, dt, NULL, NULL};
    ZS_REQUIRE(dt == ZS_DTYPE_F32 || dt == ZS_DTYPE_BF16, ZS_ERR_INVALID,
               "export: dtype must be f32 or bf16");
    order = malloc((size_t)l->n_tensors * sizeof *order);
    ZS_REQUIRE(order, ZS_ERR_OOM, "%s: out of memory", out);
    ZS_CHECK(zs_llmc_order(l, c, order));
    ZS_CHECK(alloc_chunks(l, m->info.block_elems, out, &chunk, &chunk_n, &o.conv));
    int32_t h[256];
    memset(h, 0, sizeof h);
    h[0] = ZS_LLMC_MAGIC;
    h[1] = dt == ZS_DTYPE_F32 ? ZS_LLMC_VERSION_F32 : ZS_LLMC_VERSION_BF16;
    h[2] = c->max_seq;
    h[3] = c->vocab;
    h[4] = c->n_layer;
    h[5] = c->n_head;
    h[6] = c->n_embd;
    h[7] = c->padded_vocab;
    ZS_CHECK(zs_out_open(out, tmp, sizeof tmp, &o.fd));
    ZS_CHECK(zs_out_write(o.fd, out, h, sizeof h));
    /* llm.c keeps the padded vocabulary rows (zero) in wte, exactly like the layout. */
    for (int k = 0; k < l->n_tensors; k++) {
        const zs_tensor_desc *t = &l->tensors[order[k]];
        ZS_CHECK(stream_tensor(r, &o, t, t->count, 0, chunk, chunk_n, &whole, &whole_n));
    }
    ZS_CHECK(zs_out_commit(o.fd, tmp, out));
    o.fd = -1;
fail:
    if (o.fd >= 0) zs_out_abort(o.fd, tmp);
    free(order);
    free(chunk);
    free(whole);
    free(o.conv);
    return st;
}
