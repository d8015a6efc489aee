/* Conversions between zshard checkpoints and other formats: the Hugging Face safetensors
 * layout of GPT-2 (tensor names, Conv1D [in, out] weights), llm.c's model file, and offline
 * resharding. Tensor names are mapped by a per-architecture table (names.c), so a new model
 * family adds a table, not code paths. Every reader of a foreign file validates it fully and
 * names the file in its errors; every writer writes to OUT.tmp and renames, so a failure
 * leaves no partial output. */
#ifndef ZS_CKPT_CONVERT_H
#define ZS_CKPT_CONVERT_H

#include "ckpt/ckpt.h"

#define ZS_LLMC_MAGIC 20240326
#define ZS_LLMC_VERSION_F32 3
#define ZS_LLMC_VERSION_BF16 5
#define ZS_LLMC_HEADER_BYTES 1024
#define ZS_ST_MAX_HEADER (100u << 20) /* safetensors' own limit on the JSON header */
#define ZS_ST_MAX_DIMS 8

/* ---- names (names.c) ----------------------------------------------------------------- */

/* How one layout tensor appears in a foreign file. */
typedef struct zs_ext_tensor {
    int tensor;        /* index into the layout */
    char hf_name[128]; /* transformer.h.0.attn.c_attn.weight */
    int ndim;
    int64_t hf_shape[2];  /* shape in the safetensors file */
    int transpose;        /* stored [in, out] there, [out, in] here */
    int64_t rows;         /* leading rows exported (wte: the real vocabulary only) */
    int llmc_slot, layer; /* llm.c parameter tensor index (0..15) and layer, -1 if global */
} zs_ext_tensor;

/* One entry per layout tensor, in layout order. */
zs_status zs_ext_map(const zs_layout *l, const zs_model_config *c, zs_ext_tensor *out);
/* Layout tensor indices in llm.c's file order (wte, wpe, ln1w over layers, ...). */
zs_status zs_llmc_order(const zs_layout *l, const zs_model_config *c, int *order);
/* Preset name with these dimensions ("gpt2-124m"), or "custom". */
void zs_model_name_for(zs_model_config *c);
/* Accept a foreign tensor name that the import ignores (tied head, attention mask buffers). */
int zs_ext_ignored(const char *name);

/* ---- safetensors (safetensors.c) -------------------------------------------------------- */

typedef struct zs_st_entry {
    char name[128];
    char dtype[12]; /* "F32", "BF16", ... */
    int elem_size;
    int ndim;
    int64_t shape[ZS_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets inside the data section */
    int file;            /* which file of a sharded checkpoint (0 for one file) */
} zs_st_entry;

typedef struct zs_st_header {
    uint64_t data_start; /* 8 + header length */
    int n;
    zs_st_entry *e;
    /* From zshard's __metadata__ ("zshard.n_head", ...); 0 / "" where absent. */
    char meta_arch[16];
    int meta_n_head, meta_n_kv_head, meta_ffn_hidden, meta_max_seq, meta_vocab;
    double meta_rope_theta, meta_norm_eps;
} zs_st_header;

/* Parse a safetensors header: buf holds the file's first len bytes (at least the 8-byte length
 * and the JSON), file_size is the whole file's size. Checks the JSON, every dtype, shape and
 * offset range against the data section, and that tensors do not overlap. */
zs_status zs_st_parse(const uint8_t *buf, size_t len, uint64_t file_size, const char *what,
                      zs_st_header *out);
void zs_st_header_free(zs_st_header *h);
/* Export a checkpoint's master parameters as one safetensors file (dt: F32 or BF16),
 * streamed tensor by tensor. */
zs_status zs_st_export(zs_ckpt_reader *r, const char *out, zs_dtype dt);
/* Import a safetensors file (GPT-2 or LLaMA in HF layout) as a step-0 checkpoint at out (Adam
 * state zero). Shapes do not carry everything (heads; for LLaMA also positions, rope_theta,
 * norm_eps): the file's zshard metadata, else hint (a preset's config; fields <= 0 unset;
 * NULL = none) supplies the rest. */
zs_status zs_st_import(const char *file, const char *out, const zs_model_config *hint);
/* The model config zs_st_import would build, from the header alone (nothing else read). */
zs_status zs_st_config(const char *file, const zs_model_config *hint, zs_model_config *cfg);
/* Import nfiles safetensors files that together hold one model (a Hugging Face sharded
 * checkpoint) as the model cfg describes (every tensor's shape is checked against it); what
 * names the whole in errors. Tensors may be F32, BF16 or F16. */
#define ZS_ST_MAX_FILES 1024
zs_status zs_st_import_files(const char *const *files, int nfiles, const char *what,
                             const zs_model_config *cfg, const char *out);

/* ---- Hugging Face model directories (hf.c) ------------------------------------------------ */

/* Default shard size of `export --format hf`, as transformers' save_pretrained. */
#define ZS_HF_SHARD_BYTES (5ull << 30)
/* The model config of dir/config.json (GPT2LMHeadModel or LlamaForCausalLM); every field of
 * hint that is set (> 0) must agree with it, else ZS_ERR_INVALID naming the field. What the
 * config holds that zshard cannot represent (rope_scaling, biases in LLaMA, another
 * activation...) is ZS_ERR_UNSUPPORTED naming it. */
zs_status zs_hf_config(const char *dir, const zs_model_config *hint, zs_model_config *cfg);
/* Import dir (config.json, and model.safetensors or model.safetensors.index.json with its
 * shards) as a step-0 checkpoint at out. */
zs_status zs_hf_import(const char *dir, const char *out, const zs_model_config *hint);
/* Export as a Hugging Face directory: config.json and model.safetensors, or shards of at
 * most shard_bytes with model.safetensors.index.json. Written as out.tmp and renamed. */
zs_status zs_hf_export(zs_ckpt_reader *r, const char *out, zs_dtype dt, uint64_t shard_bytes);
/* One safetensors file with layout tensors [t0, t1) (export.c). */
zs_status zs_st_export_range(zs_ckpt_reader *r, const char *out, zs_dtype dt, int t0, int t1);

/* ---- llm.c model file (llmc.c) -------------------------------------------------------- */

typedef struct zs_llmc_header {
    int version; /* 3: fp32, 5: bf16 */
    zs_model_config cfg;
} zs_llmc_header;

/* Parse the 256-int32 header (buf: at least ZS_LLMC_HEADER_BYTES bytes of len) and check the
 * file size matches the parameters it announces. */
zs_status zs_llmc_parse(const uint8_t *buf, size_t len, uint64_t file_size, const char *what,
                        zs_llmc_header *out);
zs_status zs_llmc_export(zs_ckpt_reader *r, const char *out, zs_dtype dt);
zs_status zs_llmc_import(const char *file, const char *out);

/* ---- any source of weights (source.c) ------------------------------------------------------ */

typedef enum zs_source_kind {
    ZS_SOURCE_CKPT = 0,    /* a zshard checkpoint directory or save dir */
    ZS_SOURCE_SAFETENSORS, /* one safetensors file */
    ZS_SOURCE_HF_DIR,      /* a Hugging Face model directory (config.json + safetensors) */
    ZS_SOURCE_LLMC,        /* an llm.c model file */
} zs_source_kind;

/* What path is, from what it holds (a manifest, config.json, a magic), not from its name. */
zs_status zs_source_kind_of(const char *path, zs_source_kind *kind);
/* The model config a source describes (hint fills what the source does not say, as in
 * zs_st_import; NULL = none). Reads headers and configs only. */
zs_status zs_source_config(const char *path, const zs_model_config *hint, zs_model_config *cfg);
/* Convert a source that is not a zshard checkpoint into a step-0 checkpoint at out. */
zs_status zs_source_import(const char *path, const zs_model_config *hint, const char *out);

/* ---- whole checkpoints (build.c) --------------------------------------------------------- */

/* Fills dst with elements [lo, lo+n) of (unit, kind); NULL source = zeros. */
typedef zs_status (*zs_ckpt_source)(void *ctx, int unit, int kind, int64_t lo, int64_t n,
                                    float *dst);
/* Write a complete checkpoint directory at out (must not exist) for info's world size,
 * rank file by rank file, one shard in memory at a time. */
zs_status zs_ckpt_build(const char *out, const zs_ckpt_info *info, zs_ckpt_source src, void *ctx);
/* Offline reshard: the checkpoint at in, rewritten for world_size ranks and stage. */
zs_status zs_ckpt_reshard(const char *in, const char *out, int world_size, zs_stage stage);
/* A step-0 info for an imported model. */
void zs_ckpt_info_import(zs_ckpt_info *info, const zs_model_config *c);

/* Write/remove helpers shared by the exporters: create path.tmp, and on success fsync and
 * rename it to path. */
zs_status zs_out_open(const char *path, char *tmp, size_t cap, int *fd);
zs_status zs_out_write(int fd, const char *path, const void *buf, size_t n);
zs_status zs_out_commit(int fd, const char *tmp, const char *path);
void zs_out_abort(int fd, const char *tmp);

#endif
