/* hex.h - bytes as lower-case hex and back: the opaque cursor of GET
 * /queues/{q}/groups (a group name may hold any UTF-8, which a query string
 * would have to escape). Pure. */
#ifndef RETRYD_HEX_H
#define RETRYD_HEX_H

#include <stddef.h>

#include "retryd/buf.h"

/* Appends s[0..len) to out as 2 * len lower-case hex digits. */
void rd_hex_encode(const char *s, size_t len, rd_buf_t *out);

/* The value of one hex digit (either case), or -1 when c is none. */
int rd_hex_digit(char c);

/* Decodes the hex digits s[0..len) (either case) into out (cap bytes).
 * Returns the number of bytes, or -1 when len is odd, a character is no hex
 * digit, or the bytes would not fit. */
long rd_hex_decode(const char *s, size_t len, char *out, size_t cap);

#endif
