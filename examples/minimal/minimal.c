/* Fit y = 3x - 1 with a ZeRO-3 sharded linear model (docs/embedding.md). */
#include <stdio.h>
#include <zshard.h>

#define OK(call)                                                                                   \
    if ((call) != ZS_OK) {                                                                         \
        fprintf(stderr, "%s\n", zs_last_error());                                                  \
        return 1;                                                                                  \
    }

int main(void) {
    zs_comm_t *comm;
    zs_comm_config cc = zs_comm_config_default();
    OK(zs_comm_create(&cc, &comm)); /* RANK, WORLD_SIZE from `zshard run -n N` */
    int rank = zs_comm_rank(comm), world = zs_comm_world_size(comm);
    zs_units_t *units;
    OK(zs_units_create(&units));
    OK(zs_units_add_unit(units, "linear", 1));
    zs_tensor_spec w = zs_tensor_spec_default(), b = zs_tensor_spec_default();
    w.name = "w", w.shape[0] = 1, w.init = ZS_INIT_NORMAL, w.init_std = 1.0f;
    b.name = "b", b.shape[0] = 1;
    OK(zs_units_add_tensor(units, &w));
    OK(zs_units_add_tensor(units, &b));
    zs_module_config mc = zs_module_config_default();
    mc.stage = ZS_STAGE_3;
    zs_module_t *m;
    OK(zs_module_create(units, comm, &mc, &m));
    zs_units_destroy(units);
    zs_tensor_info ti;
    OK(zs_module_tensor(m, "b", &ti)); /* b's offset inside the unit's flat buffer */
    zs_adamw_config opt = zs_adamw_config_default();
    opt.lr = 0.05f, opt.weight_decay = 0.0f;
    for (int step = 0; step < 300; step++) {
        float *p, *g;
        OK(zs_module_zero_grad(m));
        OK(zs_module_backward_begin(m, 0, &p, &g)); /* forward and backward in one */
        for (int i = 0; i < 2; i++) {               /* this rank's two samples */
            float x = (i ? -1.0f : 1.0f) * (rank + 1) / world;
            float err = p[0] * x + p[ti.offset] - (3 * x - 1); /* d(mean err^2 / 2) below */
            g[0] += err * x / (2 * world), g[ti.offset] += err / (2 * world);
        }
        OK(zs_module_backward_end(m, 0));
        OK(zs_module_step(m, &opt, NULL));
    }
    float wv, bv;
    OK(zs_module_get_param(m, "w", &wv, 1));
    OK(zs_module_get_param(m, "b", &bv, 1));
    if (rank == 0) printf("w %.3f b %.3f\n", wv, bv);
    zs_module_destroy(m);
    zs_comm_destroy(comm);
    return 0;
}
