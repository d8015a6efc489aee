/* The emulated GPU's timeline (docs/cuda.md, "The timeline") on hand-made work whose order is
 * known: what may overlap does, what is ordered does not. Each expectation is built from the
 * records' own prices, so it holds whatever the H100 model charges:
 *  - two kernels on one stream: the timeline is their sum;
 *  - one kernel on each of two non-blocking streams, nothing between them: their maximum;
 *  - the same with an event wait, or a host synchronisation before the second launch: the sum;
 *  - a pinned host-to-device copy beside a kernel on another stream: their maximum, the copy
 *    priced over PCIe (its bound "pcie", twice the bytes about twice the time, slower than the
 *    same bytes moved within device memory);
 *  - host work in a range, then a kernel: the range's measured work plus the kernel; a range
 *    that blocks on a copy held back half a second (ZS_EMU_COPY_DELAY_US) counts its work, not
 *    its wait (at least 0.25 s of it, whatever the host's load between the queuing and the wait);
 *  - a kernel launched from another host thread that never synchronised starts at 0 on the
 *    timeline (the host threads' clocks are their own), and after another thread's work once
 *    the hand-off is marked (zs_emu_host_mark / zs_emu_host_after). */
#include "cuda_emu.h"
#include "emu_profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <thread>

static int g_checks, g_fail;

static void check(int ok, const char *what, double got, double want) {
    g_checks++;
    printf("%s %-58s got %.9f want %.9f\n", ok ? "ok  " : "FAIL", what, got, want);
    if (!ok) g_fail++;
}

static int near(double a, double b) {
    return fabs(a - b) <= 1e-12 + 1e-9 * fabs(b);
}

static void scale(float *out, const float *in, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = 2.0f * in[i];
}

enum { N = 1 << 16 };
static float *g_a, *g_b, *g_c, *g_d;

static void launch(cudaStream_t s, float *out, const float *in) {
    zs_emu_launch("scale", scale, dim3(N / 256), dim3(256), 0, s, out, in, N);
}

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The records of the last recording: their count, sum, and record i's price. */
static double rec(size_t i) {
    zs_emu_record r;
    if (zs_emu_profile_get(i, &r) != 0) {
        printf("FAIL: no record %zu\n", i);
        g_fail++;
        return 0;
    }
    return r.predicted;
}

static double find(const char *prefix, zs_emu_record *out) {
    for (size_t i = 0; i < zs_emu_profile_count(); i++) {
        zs_emu_profile_get(i, out);
        if (!strncmp(out->name, prefix, strlen(prefix))) return out->predicted;
    }
    printf("FAIL: no record named %s...\n", prefix);
    g_fail++;
    return 0;
}

static void streams(cudaStream_t s1, cudaStream_t s2) {
    zs_emu_profile_start();
    launch(s1, g_b, g_a);
    launch(s1, g_c, g_a);
    zs_emu_profile_stop();
    check(near(zs_emu_profile_timeline(), rec(0) + rec(1)), "one stream: the sum",
          zs_emu_profile_timeline(), rec(0) + rec(1));

    zs_emu_profile_start();
    launch(s1, g_b, g_a);
    launch(s2, g_c, g_a);
    zs_emu_profile_stop();
    check(near(zs_emu_profile_timeline(), fmax(rec(0), rec(1))), "two streams: the maximum",
          zs_emu_profile_timeline(), fmax(rec(0), rec(1)));

    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    zs_emu_profile_start();
    launch(s1, g_b, g_a);
    cudaEventRecord(ev, s1);
    cudaStreamWaitEvent(s2, ev, 0);
    launch(s2, g_c, g_b);
    zs_emu_profile_stop();
    check(near(zs_emu_profile_timeline(), rec(0) + rec(1)), "two streams, an event wait: the sum",
          zs_emu_profile_timeline(), rec(0) + rec(1));
    cudaEventDestroy(ev);

    zs_emu_profile_start();
    launch(s1, g_b, g_a);
    cudaStreamSynchronize(s1);
    launch(s2, g_c, g_b);
    zs_emu_profile_stop();
    check(near(zs_emu_profile_timeline(), rec(0) + rec(1)), "two streams, a host sync: the sum",
          zs_emu_profile_timeline(), rec(0) + rec(1));
}

static void copies(cudaStream_t s1, cudaStream_t s2, float *pinned, size_t bytes) {
    zs_emu_record r, up, d2d;
    zs_emu_profile_start();
    cudaMemcpyAsync(g_d, pinned, bytes / 2, cudaMemcpyHostToDevice, s1);
    zs_emu_profile_stop();
    double half = find("cudaMemcpyAsync (HostToDevice)", &r);

    zs_emu_profile_start();
    cudaMemcpyAsync(g_d, pinned, bytes, cudaMemcpyHostToDevice, s1);
    launch(s2, g_b, g_a);
    cudaMemcpyAsync(g_c, g_d, bytes, cudaMemcpyDeviceToDevice, s2);
    zs_emu_profile_stop();
    double copy = find("cudaMemcpyAsync (HostToDevice)", &up);
    double dd = find("cudaMemcpyAsync device to device", &d2d);
    double k = find("scale", &r);
    check(!strcmp(up.bound, "pcie"), "a pinned upload is bound by PCIe", 0, 0);
    check(copy > 1.9 * half && copy < 2.0 * half, "twice the bytes, about twice the time", copy,
          2 * half);
    check(copy > dd, "slower than the same bytes within device memory", copy, dd);
    check(near(zs_emu_profile_timeline(), fmax(copy, k + dd)),
          "a copy beside a kernel's stream: the maximum", zs_emu_profile_timeline(),
          fmax(copy, k + dd));
}

static void host_ranges(cudaStream_t s1, float *pinned) {
    zs_emu_record r;
    zs_emu_profile_start();
    zs_emu_host_range_push("sleep");
    usleep(20000);
    zs_emu_host_range_pop();
    launch(s1, g_b, g_a);
    zs_emu_profile_stop();
    double work = find("host: sleep", &r), k = find("scale", &r);
    check(work >= 0.02, "a host range's work: at least its sleep", work, 0.02);
    check(near(zs_emu_profile_timeline(), work + k), "host work, then a kernel: the sum",
          zs_emu_profile_timeline(), work + k);

    /* a range blocked on a copy the emulator holds back by ZS_EMU_COPY_DELAY_US */
    zs_emu_profile_start();
    double t0 = wall();
    zs_emu_host_range_push("waits");
    cudaMemcpyAsync(g_d, pinned, 4096, cudaMemcpyHostToDevice, s1);
    cudaStreamSynchronize(s1);
    zs_emu_host_range_pop();
    double range = wall() - t0;
    zs_emu_profile_stop();
    work = find("host: waits", &r);
    double copy = find("cudaMemcpyAsync (HostToDevice)", &r);
    check(work <= range - 0.25, "a range's blocked time is not its work", work, range - 0.25);
    double tl = zs_emu_profile_timeline();
    check(tl >= copy && tl <= copy + work + 1e-12, "a blocked range: the copy's price and its work",
          tl, copy + work);
}

static void threads(cudaStream_t s1, cudaStream_t s2) {
    zs_emu_profile_start();
    launch(s1, g_b, g_a);
    cudaStreamSynchronize(s1); /* this thread's clock moves on; the other's does not */
    std::thread other([s2] { launch(s2, g_c, g_a); });
    other.join();
    zs_emu_profile_stop();
    check(near(zs_emu_profile_timeline(), fmax(rec(0), rec(1))),
          "another host thread's launch starts at its own clock", zs_emu_profile_timeline(),
          fmax(rec(0), rec(1)));

    /* a hand-off the emulator cannot see (a join), made visible by mark and after */
    static const char key = 0;
    for (int told = 0; told < 2; told++) {
        zs_emu_profile_start();
        std::thread worker([] {
            zs_emu_host_range_push("worker");
            usleep(20000);
            zs_emu_host_range_pop();
            zs_emu_host_mark(&key);
        });
        worker.join();
        if (told) zs_emu_host_after(&key);
        launch(s1, g_b, g_a);
        zs_emu_profile_stop();
        zs_emu_record r;
        double work = find("host: worker", &r), k = find("scale", &r);
        double want = told ? work + k : fmax(work, k);
        check(near(zs_emu_profile_timeline(), want),
              told ? "a marked hand-off: the kernel after the other thread's work"
                   : "an unmarked hand-off: the kernel at the launching thread's clock",
              zs_emu_profile_timeline(), want);
    }
}

int main(void) {
    setenv("ZS_EMU_COPY_DELAY_US", "500000", 1); /* before the emulator reads its settings */
    const size_t bytes = 64u << 20;
    float *pinned = nullptr;
    cudaMalloc((void **)&g_a, N * sizeof(float));
    cudaMalloc((void **)&g_b, N * sizeof(float));
    cudaMalloc((void **)&g_c, bytes);
    cudaMalloc((void **)&g_d, bytes);
    cudaMallocHost((void **)&pinned, bytes);
    cudaMemset(g_a, 0, N * sizeof(float));
    memset(pinned, 0, bytes);
    cudaStream_t s1, s2;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    streams(s1, s2);
    copies(s1, s2, pinned, bytes);
    host_ranges(s1, pinned);
    threads(s1, s2);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    cudaFreeHost(pinned);
    printf("emu_timeline: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
