/* utf8.h - strict UTF-8 (RFC 3629): the one validator of request text and
 * queue names, and the repair of stored text on its way into JSON. Pure. */
#ifndef RETRYD_UTF8_H
#define RETRYD_UTF8_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/buf.h"

/* Length (1-4) of the UTF-8 sequence at s[0..left), with its code point in
 * *cp; 0 when it is not valid UTF-8: a stray or missing continuation byte,
 * an overlong form, a surrogate (U+D800-U+DFFF) or a code point past
 * U+10FFFF. left must be at least 1. U+0000 is a valid 1-byte sequence. */
size_t rd_utf8_sequence(const unsigned char *s, size_t left, unsigned *cp);

/* True when s[0..len) is valid UTF-8 as a whole. */
bool rd_utf8_valid(const char *s, size_t len);

/* Appends s[0..len) to out with every byte that does not start a valid
 * sequence replaced by U+FFFD (EF BF BD); valid sequences are copied as
 * they are. */
void rd_utf8_repair(const char *s, size_t len, rd_buf_t *out);

/* The length of s[0..len) cut to at most max bytes, never inside a UTF-8
 * sequence: a cut at byte max moves back to the start of its character. */
size_t rd_utf8_cut(const char *s, size_t len, size_t max);

#endif
