/* buf.h - a growable byte buffer (always NUL-terminated for convenience). */
#ifndef RETRYD_BUF_H
#define RETRYD_BUF_H

#include <stddef.h>

typedef struct rd_buf {
    char *data;     /* owned; NULL until the first append */
    size_t len;     /* bytes used, not counting the trailing NUL */
    size_t cap;     /* bytes allocated */
} rd_buf_t;

#define RD_BUF_INIT { NULL, 0, 0 }

void rd_buf_reserve(rd_buf_t *b, size_t extra);
void rd_buf_append(rd_buf_t *b, const void *data, size_t len);
void rd_buf_puts(rd_buf_t *b, const char *s);
void rd_buf_putc(rd_buf_t *b, char c);
void rd_buf_printf(rd_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rd_buf_reset(rd_buf_t *b);     /* len = 0, keeps memory */
void rd_buf_free(rd_buf_t *b);      /* releases memory, back to RD_BUF_INIT */
/* Hands the bytes to the caller (free with rd_free); the buffer is emptied. */
char *rd_buf_take(rd_buf_t *b, size_t *len);

#endif
