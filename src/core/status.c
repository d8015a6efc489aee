/* zs_status names and the thread-local last-error message. */
#include "status.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char g_msg[1024];

const char *zs_status_string(zs_status st) {
    switch (st) {
    case ZS_OK:
        return "ZS_OK";
    case ZS_ERR_INVALID:
        return "ZS_ERR_INVALID";
    case ZS_ERR_OOM:
        return "ZS_ERR_OOM";
    case ZS_ERR_IO:
        return "ZS_ERR_IO";
    case ZS_ERR_FORMAT:
        return "ZS_ERR_FORMAT";
    case ZS_ERR_COMM:
        return "ZS_ERR_COMM";
    case ZS_ERR_TIMEOUT:
        return "ZS_ERR_TIMEOUT";
    case ZS_ERR_CUDA:
        return "ZS_ERR_CUDA";
    case ZS_ERR_UNSUPPORTED:
        return "ZS_ERR_UNSUPPORTED";
    case ZS_ERR_INTERNAL:
        return "ZS_ERR_INTERNAL";
    }
    return "ZS_ERR_UNKNOWN";
}

const char *zs_last_error(void) {
    return g_msg;
}

zs_status zs_error(zs_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return st;
}

void zs_error_trace(const char *expr, const char *file, int line) {
    const char *src = strstr(file, "src/"); /* a path from the repository, not the build's */
    size_t n = strlen(g_msg);
    if (n + 1 < sizeof g_msg)
        snprintf(g_msg + n, sizeof g_msg - n, " (in %s at %s:%d)", expr, src ? src : file, line);
}

int zs_error_tracing(void) {
    static _Atomic int on = -1; /* every thread reads the same variable: a benign first race */
    int v = on;
    if (v < 0) {
        const char *e = getenv("ZS_ERROR_TRACE");
        on = v = e && !strcmp(e, "1");
    }
    return v;
}

void zs_error_clear(void) {
    g_msg[0] = '\0';
}
