/* utf8.c - strict UTF-8 validation and repair. */
#include "retryd/utf8.h"

size_t rd_utf8_sequence(const unsigned char *s, size_t left, unsigned *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    size_t n;
    unsigned min;
    if ((s[0] & 0xE0) == 0xC0) { n = 2; min = 0x80; *cp = s[0] & 0x1F; }
    else if ((s[0] & 0xF0) == 0xE0) { n = 3; min = 0x800; *cp = s[0] & 0x0F; }
    else if ((s[0] & 0xF8) == 0xF0) { n = 4; min = 0x10000; *cp = s[0] & 0x07; }
    else return 0;
    if (n > left) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        *cp = (*cp << 6) | (s[i] & 0x3F);
    }
    if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
    return n;
}

bool rd_utf8_valid(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (u[i] < 0x80) {  /* ASCII runs are the common case */
            i++;
            continue;
        }
        unsigned cp;
        size_t n = rd_utf8_sequence(u + i, len - i, &cp);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

void rd_utf8_repair(const char *s, size_t len, rd_buf_t *out)
{
    const unsigned char *u = (const unsigned char *)s;
    rd_buf_reserve(out, len + 8);
    size_t i = 0, run = 0;  /* s[run..i) is valid and not yet copied */
    while (i < len) {
        unsigned cp;
        size_t n = rd_utf8_sequence(u + i, len - i, &cp);
        if (n > 0) {
            i += n;
            continue;
        }
        rd_buf_append(out, s + run, i - run);
        rd_buf_append(out, "\xEF\xBF\xBD", 3);
        run = ++i;
    }
    rd_buf_append(out, s + run, len - run);
}

size_t rd_utf8_cut(const char *s, size_t len, size_t max)
{
    if (len <= max) return len;
    size_t cut = max;
    while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--;
    return cut;
}
