/* Monotonic wall-clock timers. */
#ifndef ZS_CORE_TIMER_H
#define ZS_CORE_TIMER_H

#include <stdint.h>

/* Nanoseconds from CLOCK_MONOTONIC. */
uint64_t zs_now_ns(void);
/* Seconds (double) from CLOCK_MONOTONIC. */
double zs_now_s(void);

#endif
