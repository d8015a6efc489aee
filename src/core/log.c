/* Leveled, rank-prefixed logging. One fprintf per line so ranks do not interleave mid-line. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = -1;
static int g_level = -1;

void zs_log_set_rank(int rank) {
    g_rank = rank;
}

void zs_log_set_level(zs_log_level level) {
    g_level = (int)level;
}

zs_log_level zs_log_get_level(void) {
    if (g_level < 0) {
        const char *e = getenv("ZS_LOG_LEVEL");
        g_level = ZS_LOG_INFO;
        if (e) {
            if (!strcmp(e, "error"))
                g_level = ZS_LOG_ERROR;
            else if (!strcmp(e, "warn"))
                g_level = ZS_LOG_WARN;
            else if (!strcmp(e, "debug"))
                g_level = ZS_LOG_DEBUG;
        }
    }
    return (zs_log_level)g_level;
}

void zs_log(zs_log_level level, const char *fmt, ...) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    if (level > zs_log_get_level()) return;
    char body[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (g_rank >= 0)
        fprintf(stderr, "[rank %d] zshard %s: %s\n", g_rank, names[level], body);
    else
        fprintf(stderr, "zshard %s: %s\n", names[level], body);
}
