/* log.c - leveled logging to stderr with a UTC timestamp. */
#include "retryd/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static rd_log_level_t current_level = RD_LOG_INFO;
static const char *const level_names[] = { "debug", "info", "warn", "error" };

int rd_log_parse_level(const char *name, rd_log_level_t *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (rd_log_level_t)i;
            return 0;
        }
    }
    return -1;
}

void rd_log_set_level(rd_log_level_t level)
{
    current_level = level;
}

void rd_log(rd_log_level_t level, const char *fmt, ...)
{
    if (level < current_level) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char line[1024];
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
