/* jsonw.h - a streaming JSON writer: compact JSON text appended straight to
 * a rd_buf_t, with no document tree (the response path's writer; json.h
 * stays the reader and the builder of rare documents).
 *
 * Values go in document order; the writer puts the commas and colons. Its
 * strings are written as rd_json_set_stringn writes them: binary-safe (NUL
 * is \u0000), every byte that does not start a valid UTF-8 sequence becomes
 * U+FFFD, and the bytes are escaped the way cJSON prints them (\" \\ \b \f
 * \n \r \t, other control bytes as \u00XX), so the text is byte for byte
 * what the cJSON documents printed. */
#ifndef RETRYD_JSONW_H
#define RETRYD_JSONW_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/buf.h"

#define RD_JSONW_MAX_DEPTH 32

typedef struct rd_jsonw {
    rd_buf_t *out;          /* borrowed: the text is appended here */
    unsigned depth;         /* open objects and arrays */
    bool after_key;         /* a key was written: the next value takes no comma */
    bool has_item[RD_JSONW_MAX_DEPTH + 1];  /* per depth: a value was written */
} rd_jsonw_t;

void rd_jsonw_init(rd_jsonw_t *w, rd_buf_t *out);

/* Nesting deeper than RD_JSONW_MAX_DEPTH is a programming error (asserted). */
void rd_jsonw_object_open(rd_jsonw_t *w);
void rd_jsonw_object_close(rd_jsonw_t *w);
void rd_jsonw_array_open(rd_jsonw_t *w);
void rd_jsonw_array_close(rd_jsonw_t *w);

/* A member name inside an object; its value is the next thing written. */
void rd_jsonw_key(rd_jsonw_t *w, const char *name);

void rd_jsonw_string(rd_jsonw_t *w, const char *s);
void rd_jsonw_stringn(rd_jsonw_t *w, const char *s, size_t len);
void rd_jsonw_int(rd_jsonw_t *w, long long v);
/* A finite number in the shortest of %.15g / %.17g that reads back the same. */
void rd_jsonw_number(rd_jsonw_t *w, double v);
void rd_jsonw_bool(rd_jsonw_t *w, bool v);
void rd_jsonw_null(rd_jsonw_t *w);
/* A string the caller knows needs no escaping (an RFC 3339 timestamp from
 * rd_format_time_ms, a status name): written between quotes as it is. */
void rd_jsonw_plain_string(rd_jsonw_t *w, const char *s, size_t len);

#endif
