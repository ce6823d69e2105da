/* buf.c - a growable byte buffer. */
#include "retryd/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"

void rd_buf_reserve(rd_buf_t *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    b->data = rd_realloc(b->data, cap);
    b->cap = cap;
    b->data[b->len] = '\0';
}

void rd_buf_append(rd_buf_t *b, const void *data, size_t len)
{
    rd_buf_reserve(b, len);
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void rd_buf_puts(rd_buf_t *b, const char *s)
{
    rd_buf_append(b, s, strlen(s));
}

void rd_buf_putc(rd_buf_t *b, char c)
{
    rd_buf_append(b, &c, 1);
}

void rd_buf_printf(rd_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        rd_buf_append(b, small, (size_t)n);
        return;
    }
    rd_buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void rd_buf_reset(rd_buf_t *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

void rd_buf_free(rd_buf_t *b)
{
    rd_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *rd_buf_take(rd_buf_t *b, size_t *len)
{
    if (b->data == NULL) rd_buf_append(b, "", 0);
    char *p = b->data;
    if (len) *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}
