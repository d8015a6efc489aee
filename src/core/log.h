/* Leveled logging to stderr with a rank prefix. Level from ZS_LOG_LEVEL
 * (error|warn|info|debug, default info). */
#ifndef ZS_CORE_LOG_H
#define ZS_CORE_LOG_H

typedef enum zs_log_level {
    ZS_LOG_ERROR = 0,
    ZS_LOG_WARN,
    ZS_LOG_INFO,
    ZS_LOG_DEBUG,
} zs_log_level;

/* Rank shown as "[rank R]" in every line; -1 (default) shows no prefix. */
void zs_log_set_rank(int rank);
void zs_log_set_level(zs_log_level level);
zs_log_level zs_log_get_level(void);
void zs_log(zs_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ZS_LOG_E(...) zs_log(ZS_LOG_ERROR, __VA_ARGS__)
#define ZS_LOG_W(...) zs_log(ZS_LOG_WARN, __VA_ARGS__)
#define ZS_LOG_I(...) zs_log(ZS_LOG_INFO, __VA_ARGS__)
#define ZS_LOG_D(...) zs_log(ZS_LOG_DEBUG, __VA_ARGS__)

#endif
