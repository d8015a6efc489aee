/* Monotonic clock: immune to wall-clock adjustments, so durations and deadlines are sound. */
#include "timer.h"

#include <time.h>

uint64_t zs_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double zs_now_s(void) {
    return (double)zs_now_ns() * 1e-9;
}
