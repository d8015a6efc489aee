/* A small MLP language model trained with zshard's public sharding API only (<zshard.h>): a
 * token embedding, n residual tanh blocks and an output head, each block its own unit, with
 * forward and backward written as plain C loops. Run it on 2 ranks with ZeRO-3:
 *
 *   zshard run -n 2 -- ./mlp_lm --stage 3 --steps 20
 *
 * Rank 0 prints one line per step and, at the end, a "result" line with the parameter hash
 * and, for every rank, the measured model-state bytes next to the formula of docs/architecture.md
 * "Memory accounting". */
#include <zshard.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        zs_status s_ = (call);                                                                     \
        if (s_ != ZS_OK) {                                                                         \
            fprintf(stderr, "mlp_lm: %s failed: %s: %s\n", #call, zs_status_string(s_),            \
                    zs_last_error());                                                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { V = 64, C = 32, NBLOCK = 2 };

typedef struct model {
    zs_module_t *mod;
    int n;                /* tokens per micro-batch on this rank */
    float *x[NBLOCK + 1]; /* block inputs (x[NBLOCK] feeds the head), [n, C] */
    float *a[NBLOCK];     /* tanh activations, [n, C] */
    float *dx, *probs;    /* [n, C], [n, V] */
    int64_t off_w[NBLOCK], off_b[NBLOCK], off_ow, off_ob;
} model;

static int64_t offset(zs_module_t *m, const char *name) {
    zs_tensor_info ti;
    CHECK(zs_module_tensor(m, name, &ti));
    return ti.offset;
}

static zs_units_t *declare(void) {
    zs_units_t *u = NULL;
    zs_tensor_spec t = zs_tensor_spec_default();
    char name[64];
    CHECK(zs_units_create(&u));
    CHECK(zs_units_add_unit(u, "embed", 1));
    t = (zs_tensor_spec){.name = "wte",
                         .ndim = 2,
                         .shape = {V, C},
                         .decay = 1,
                         .init = ZS_INIT_NORMAL,
                         .init_std = 0.5f,
                         .zero_from = -1};
    CHECK(zs_units_add_tensor(u, &t));
    for (int l = 0; l < NBLOCK; l++) {
        snprintf(name, sizeof name, "block.%d", l);
        CHECK(zs_units_add_unit(u, name, 1));
        snprintf(name, sizeof name, "block.%d.w", l);
        t = (zs_tensor_spec){.name = name,
                             .ndim = 2,
                             .shape = {C, C},
                             .decay = 1,
                             .init = ZS_INIT_NORMAL,
                             .init_std = 0.2f,
                             .zero_from = -1};
        CHECK(zs_units_add_tensor(u, &t));
        snprintf(name, sizeof name, "block.%d.b", l);
        t = (zs_tensor_spec){.name = name, .ndim = 1, .shape = {C}, .zero_from = -1};
        CHECK(zs_units_add_tensor(u, &t));
    }
    CHECK(zs_units_add_unit(u, "head", 1));
    t = (zs_tensor_spec){.name = "head.w",
                         .ndim = 2,
                         .shape = {V, C},
                         .decay = 1,
                         .init = ZS_INIT_NORMAL,
                         .init_std = 0.1f,
                         .zero_from = -1};
    CHECK(zs_units_add_tensor(u, &t));
    t = (zs_tensor_spec){.name = "head.b", .ndim = 1, .shape = {V}, .zero_from = -1};
    CHECK(zs_units_add_tensor(u, &t));
    return u;
}

/* Sum of the micro-batch's token losses; with grad_scale > 0 also the backward, adding
 * grad_scale * d(loss sum)/d(params) into the module's gradients. */
static double forward_backward(model *m, const int *in, const int *tg, float grad_scale) {
    const int n = m->n;
    float *p, *g;
    double loss = 0.0;
    CHECK(zs_module_forward_begin(m->mod, 0, &p));
    for (int i = 0; i < n; i++)
        memcpy(m->x[0] + i * C, p + (size_t)in[i] * C, C * sizeof(float));
    CHECK(zs_module_forward_end(m->mod, 0));
    for (int l = 0; l < NBLOCK; l++) {
        CHECK(zs_module_forward_begin(m->mod, 1 + l, &p));
        const float *w = p + m->off_w[l], *b = p + m->off_b[l];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < C; j++) {
                float s = b[j];
                for (int k = 0; k < C; k++)
                    s += w[j * C + k] * m->x[l][i * C + k];
                m->a[l][i * C + j] = tanhf(s);
                m->x[l + 1][i * C + j] = m->x[l][i * C + j] + m->a[l][i * C + j];
            }
        CHECK(zs_module_forward_end(m->mod, 1 + l));
    }
    const int head = NBLOCK + 1;
    CHECK(zs_module_forward_begin(m->mod, head, &p));
    const float *ow = p + m->off_ow, *ob = p + m->off_ob;
    const float *h = m->x[NBLOCK];
    for (int i = 0; i < n; i++) {
        float *z = m->probs + i * V, mx = -INFINITY, sum = 0.0f;
        for (int v = 0; v < V; v++) {
            float s = ob[v];
            for (int k = 0; k < C; k++)
                s += ow[v * C + k] * h[i * C + k];
            z[v] = s;
            mx = s > mx ? s : mx;
        }
        for (int v = 0; v < V; v++)
            sum += z[v] = expf(z[v] - mx);
        for (int v = 0; v < V; v++)
            z[v] /= sum;
        loss -= log(z[tg[i]]);
    }
    CHECK(zs_module_forward_end(m->mod, head));
    if (grad_scale <= 0) return loss;
    /* Backward: the head again (ZeRO-3 gathers it again), then the blocks in reverse.
     * d loss / d logits = (softmax - onehot) * grad_scale. */
    CHECK(zs_module_backward_begin(m->mod, head, &p, &g));
    ow = p + m->off_ow;
    memset(m->dx, 0, (size_t)n * C * sizeof(float));
    for (int i = 0; i < n; i++)
        for (int v = 0; v < V; v++) {
            float d = (m->probs[i * V + v] - (v == tg[i] ? 1.0f : 0.0f)) * grad_scale;
            g[m->off_ob + v] += d;
            for (int k = 0; k < C; k++) {
                g[m->off_ow + v * C + k] += d * h[i * C + k];
                m->dx[i * C + k] += d * ow[v * C + k];
            }
        }
    CHECK(zs_module_backward_end(m->mod, head));
    for (int l = NBLOCK - 1; l >= 0; l--) {
        CHECK(zs_module_backward_begin(m->mod, 1 + l, &p, &g));
        const float *w = p + m->off_w[l];
        for (int i = 0; i < n; i++) {
            float dpre[C], dxi[C];
            for (int j = 0; j < C; j++) {
                float aj = m->a[l][i * C + j];
                dpre[j] = m->dx[i * C + j] * (1.0f - aj * aj);
                g[m->off_b[l] + j] += dpre[j];
                dxi[j] = m->dx[i * C + j]; /* the residual path */
            }
            for (int j = 0; j < C; j++)
                for (int k = 0; k < C; k++) {
                    g[m->off_w[l] + j * C + k] += dpre[j] * m->x[l][i * C + k];
                    dxi[k] += w[j * C + k] * dpre[j];
                }
            memcpy(m->dx + i * C, dxi, sizeof dxi);
        }
        CHECK(zs_module_backward_end(m->mod, 1 + l));
    }
    CHECK(zs_module_backward_begin(m->mod, 0, &p, &g));
    for (int i = 0; i < n; i++)
        for (int k = 0; k < C; k++)
            g[(size_t)in[i] * C + k] += m->dx[i * C + k];
    CHECK(zs_module_backward_end(m->mod, 0));
    return loss;
}

/* Token j of global row r at step s: a noisy affine sequence, a pure function of (s, r, j), so
 * every world size and stage sees the same global batch. */
static void make_row(int step, int row, int T, int *in, int *tg) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(step * 7919 + row + 1);
    int t = (int)(x >> 58);
    for (int j = 0; j <= T; j++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int next = (5 * t + 3 + ((x >> 60) == 0 ? (int)(x >> 40) % V : 0)) % V;
        if (j < T) in[j] = t;
        if (j > 0) tg[j - 1] = t;
        t = next;
    }
}

int main(int argc, char **argv) {
    zs_module_config mc = zs_module_config_default();
    int steps = 20, batch = 8, T = 16, accum = 1;
    const char *save = NULL, *resume = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--stage"))
            mc.stage = !strcmp(argv[i + 1], "ddp") ? ZS_STAGE_DDP : (zs_stage)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--accum"))
            accum = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--save"))
            save = argv[i + 1];
        else if (!strcmp(argv[i], "--resume"))
            resume = argv[i + 1];
        else {
            fprintf(stderr, "usage: mlp_lm [--stage ddp|1|2|3] [--steps N] [--batch B] "
                            "[--accum K] [--save DIR] [--resume DIR]\n");
            return 2;
        }
    }
    zs_comm_config cc = zs_comm_config_default();
    zs_comm_t *comm = NULL;
    CHECK(zs_comm_create(&cc, &comm)); /* RANK/WORLD_SIZE from `zshard run`; alone: one rank */
    const int rank = zs_comm_rank(comm), world = zs_comm_world_size(comm);
    if (batch % (world * accum)) {
        fprintf(stderr, "mlp_lm: --batch %d must divide by %d ranks x %d\n", batch, world, accum);
        return 2;
    }
    const int rows = batch / world / accum; /* rows per micro-batch on this rank */
    mc.name = "mlp_lm";
    zs_units_t *units = declare();
    model m = {.n = rows * T};
    CHECK(zs_module_create(units, comm, &mc, &m.mod));
    zs_units_destroy(units);
    char name[64];
    for (int l = 0; l < NBLOCK; l++) {
        snprintf(name, sizeof name, "block.%d.w", l);
        m.off_w[l] = offset(m.mod, name);
        snprintf(name, sizeof name, "block.%d.b", l);
        m.off_b[l] = offset(m.mod, name);
    }
    m.off_ow = offset(m.mod, "head.w");
    m.off_ob = offset(m.mod, "head.b");
    for (int l = 0; l <= NBLOCK; l++)
        m.x[l] = malloc((size_t)m.n * C * sizeof(float));
    for (int l = 0; l < NBLOCK; l++)
        m.a[l] = malloc((size_t)m.n * C * sizeof(float));
    m.dx = malloc((size_t)m.n * C * sizeof(float));
    m.probs = malloc((size_t)m.n * V * sizeof(float));
    int *in = malloc((size_t)m.n * sizeof(int)), *tg = malloc((size_t)m.n * sizeof(int));
    if (resume) CHECK(zs_module_resume(m.mod, resume));

    zs_adamw_config opt = zs_adamw_config_default();
    const float scale = 1.0f / (float)(batch * T); /* gradients of the global mean loss */
    for (int s = zs_module_steps_done(m.mod) + 1; s <= steps; s++) {
        double loss = 0.0;
        float norm = 0.0f;
        CHECK(zs_module_zero_grad(m.mod));
        for (int k = 0; k < accum; k++) {
            CHECK(zs_module_micro_begin(m.mod, k, accum));
            for (int r = 0; r < rows; r++) {
                int row = rank * (batch / world) + k * rows + r;
                make_row(s, row, T, in + r * T, tg + r * T);
            }
            loss += forward_backward(&m, in, tg, scale);
        }
        opt.lr = 3e-2f * (s <= 5 ? (float)s / 5 : 1.0f); /* the caller's own schedule */
        CHECK(zs_module_step(m.mod, &opt, &norm));
        CHECK(zs_module_allsum(m.mod, loss, &loss));
        if (rank == 0)
            printf("step %d loss %.6f norm %.6f lr %.4g\n", s, loss / (batch * T), norm, opt.lr);
    }
    if (save) CHECK(zs_module_save(m.mod, save, 2));

    uint64_t hash = 0;
    CHECK(zs_module_param_hash(m.mod, &hash));
    zs_mem_stats *mem = calloc((size_t)world, sizeof *mem);
    CHECK(zs_module_gather_mem(m.mod, mem));
    int a = 0, b = 0;
    zs_mem_formula(mc.stage, NULL, &a, &b);
    const uint64_t P = (uint64_t)zs_module_num_padded(m.mod);
    if (rank == 0) {
        printf("result hash %016llx params %lld padded %llu formula %d*P+%d*P/N = %llu",
               (unsigned long long)hash, (long long)zs_module_num_params(m.mod),
               (unsigned long long)P, a, b, (unsigned long long)(a * P + b * P / world));
        for (int r = 0; r < world; r++) {
            uint64_t states = 0;
            for (int c = ZS_MEM_PARAM; c <= ZS_MEM_OPTIM_STATE; c++)
                states += mem[r].peak[c];
            printf(" rank%d %llu", r, (unsigned long long)states);
        }
        printf("\n");
    }
    free(mem);
    free(in);
    free(tg);
    for (int l = 0; l <= NBLOCK; l++)
        free(m.x[l]);
    for (int l = 0; l < NBLOCK; l++)
        free(m.a[l]);
    free(m.dx);
    free(m.probs);
    zs_module_destroy(m.mod);
    zs_comm_destroy(comm);
    return 0;
}
