/* Internal error discipline: functions return zs_status, record a message in a thread-local
 * buffer, and leave through a single `fail:` label. Only the CLI prints and exits. */
#ifndef ZS_CORE_STATUS_H
#define ZS_CORE_STATUS_H

#include "zshard.h"

#include <stdio.h>
#include <stdlib.h>

/* Record a formatted message for zs_last_error() and return st. */
zs_status zs_error(zs_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append " (in EXPR at file:line)" to the current message (each call appends, while room
 * remains). ZS_CHECK calls it on every frame a failure passes through when ZS_ERROR_TRACE=1,
 * so the message carries the path the error took (docs/architecture.md "Errors"). */
void zs_error_trace(const char *expr, const char *file, int line);
/* 1 when ZS_ERROR_TRACE=1 (read once). */
int zs_error_tracing(void);
/* Clear the thread's error message. */
void zs_error_clear(void);

/* Evaluate a zs_status expression; on failure keep its status in `st` and jump to fail. */
#define ZS_CHECK(expr)                                                                             \
    do {                                                                                           \
        zs_status zs_check_s_ = (expr);                                                            \
        if (zs_check_s_ != ZS_OK) {                                                                \
            st = zs_check_s_;                                                                      \
            if (zs_error_tracing()) zs_error_trace(#expr, __FILE__, __LINE__);                     \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Validate user input: if cond is false, record the message with status code and jump. */
#define ZS_REQUIRE(cond, code, ...)                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            st = zs_error((code), __VA_ARGS__);                                                    \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Internal invariants: a failure is a bug in zshard, never a user error. Reports and
 * returns ZS_ERR_INTERNAL through the same cleanup path. */
#define ZS_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            st = zs_error(ZS_ERR_INTERNAL, "internal error: assertion '%s' failed at %s:%d",       \
                          #cond, __FILE__, __LINE__);                                              \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#endif
