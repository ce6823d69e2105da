/* log.h - leveled logging to stderr, one line per event. */
#ifndef RETRYD_LOG_H
#define RETRYD_LOG_H

typedef enum rd_log_level {
    RD_LOG_DEBUG = 0,
    RD_LOG_INFO,
    RD_LOG_WARN,
    RD_LOG_ERROR,
} rd_log_level_t;

/* Returns 0, or -1 when name is not one of debug, info, warn, error. */
int rd_log_parse_level(const char *name, rd_log_level_t *out);
void rd_log_set_level(rd_log_level_t level);
void rd_log(rd_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define rd_debug(...) rd_log(RD_LOG_DEBUG, __VA_ARGS__)
#define rd_info(...) rd_log(RD_LOG_INFO, __VA_ARGS__)
#define rd_warn(...) rd_log(RD_LOG_WARN, __VA_ARGS__)
#define rd_error(...) rd_log(RD_LOG_ERROR, __VA_ARGS__)

#endif
