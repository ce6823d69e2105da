/* hex.c - bytes as lower-case hex and back. */
#include "retryd/hex.h"

void rd_hex_encode(const char *s, size_t len, rd_buf_t *out)
{
    static const char digits[] = "0123456789abcdef";
    rd_buf_reserve(out, 2 * len);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        rd_buf_putc(out, digits[c >> 4]);
        rd_buf_putc(out, digits[c & 15]);
    }
}

int rd_hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

long rd_hex_decode(const char *s, size_t len, char *out, size_t cap)
{
    if (len % 2 != 0 || len / 2 > cap) return -1;
    for (size_t i = 0; i < len; i += 2) {
        int hi = rd_hex_digit(s[i]), lo = rd_hex_digit(s[i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i / 2] = (char)(hi << 4 | lo);
    }
    return (long)(len / 2);
}
