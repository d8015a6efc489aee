/* The nccl backend on a real GPU (ctest label gpu): a world of one through the full API with
 * device buffers. Skips (77) without NCCL in the build or without a visible GPU. */
#include "testutil.h"
#include "zshard.h"

#include <string.h>
#ifdef ZS_HAVE_NCCL
#include <cuda_runtime.h>
#endif

int main(void) {
    zt_init("comm_nccl");
#ifndef ZS_HAVE_NCCL
    zt_skip("built without NCCL");
#else
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) zt_skip("no CUDA device");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    zs_comm_config cfg = zs_comm_config_default();
    cfg.backend = ZS_COMM_NCCL;
    cfg.timeout_s = 30;
    zs_comm_t *c = NULL;
    ZT_OK(zs_comm_create(&cfg, &c));
    enum { N = 4096 };
    float h[N], back[N], *d_in = NULL, *d_out = NULL;
    for (int i = 0; i < N; i++)
        h[i] = (float)(i % 13) - 6.0f;
    ZT_REQUIRE(cudaMalloc((void **)&d_in, sizeof h) == cudaSuccess, "cudaMalloc");
    ZT_REQUIRE(cudaMalloc((void **)&d_out, sizeof h) == cudaSuccess, "cudaMalloc");
    cudaMemcpy(d_in, h, sizeof h, cudaMemcpyHostToDevice);
    cudaMemset(d_out, 0xff, sizeof h);
    zs_comm_work_t *w = NULL;
    ZT_OK(
        zs_comm_all_reduce_async(c, d_in, d_out, N, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, "gpu", &w));
    ZT_OK(zs_comm_work_wait(w));
    cudaMemcpy(back, d_out, sizeof h, cudaMemcpyDeviceToHost);
    ZT_CHECK(!memcmp(back, h, sizeof h), "all_reduce over one GPU is a copy");
    ZT_OK(zs_comm_all_gather(c, d_in, d_out, N, ZS_DTYPE_F32, NULL, "ag"));
    ZT_OK(zs_comm_barrier(c, NULL, "b"));
    cudaDeviceSynchronize();
    cudaMemcpy(back, d_out, sizeof h, cudaMemcpyDeviceToHost);
    ZT_CHECK(!memcmp(back, h, sizeof h), "all_gather over one GPU is a copy");
    cudaFree(d_in);
    cudaFree(d_out);
    zs_comm_destroy(c);
#endif
    return zt_finish();
}
