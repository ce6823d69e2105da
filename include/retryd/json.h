/* json.h - JSON documents, wrapping cJSON. The HTTP API sees only these; the
 * SQS codec, whose interface is cJSON (include/retryd/sqs/call.h), takes the
 * tree itself (rd_json_cjson), and alloc.c gives cJSON its allocator.
 *
 * A rd_json_t is a node of a document; the root owns every node below it and
 * is released with rd_json_free. Strings returned by accessors are borrowed
 * from the document and valid until it is freed. */
#ifndef RETRYD_JSON_H
#define RETRYD_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef struct rd_json rd_json_t;

/* Parses text[0..len). Returns NULL when it is not exactly one JSON value
 * by RFC 8259's strict grammar: a raw control byte (below 0x20) inside a
 * string, or outside one other than space, tab, CR and LF, and a number
 * with a leading zero ("010", "-01") or another form JSON has not ("1.",
 * ".5", "+1") make it invalid, though cJSON alone would take them.
 * *has_nul is set when a string in it contains an escaped U+0000, which
 * cJSON would silently cut short: callers refuse such strings instead.
 * Strings are NOT checked for UTF-8 (callers check the fields they take); a
 * lone surrogate escape ("\ud800" without its pair), which is JSON syntax but
 * not text, comes out as the bytes ED A0 80, which that check refuses. */
rd_json_t *rd_json_parse(const char *text, size_t len, bool *has_nul);
void rd_json_free(rd_json_t *doc);
/* The document as the cJSON tree it is, for the SQS codec whose interface is
 * cJSON (include/retryd/sqs/call.h): the same pointer, still owned by the
 * caller (cJSON_Delete or rd_json_free). */
struct cJSON *rd_json_cjson(rd_json_t *doc);
/* The same document with every escaped U+0000 read as U+0001: comparing a
 * string's length in both tells whether that string contained a NUL. */
rd_json_t *rd_json_parse_nul_marked(const char *text, size_t len);

bool rd_json_is_object(const rd_json_t *j);
bool rd_json_is_array(const rd_json_t *j);
bool rd_json_is_string(const rd_json_t *j);
bool rd_json_is_null(const rd_json_t *j);
bool rd_json_is_bool(const rd_json_t *j);

/* Member of an object by exact name, or NULL. */
rd_json_t *rd_json_get(const rd_json_t *obj, const char *name);
/* The string value, or NULL when j is not a string. */
const char *rd_json_string(const rd_json_t *j);
bool rd_json_bool(const rd_json_t *j);
/* True when j is a number with an integral value in [-2^53, 2^53]. */
bool rd_json_integer(const rd_json_t *j, long long *out);
/* An object's members: how many, and the name of the i-th (NULL past the end). */
size_t rd_json_object_size(const rd_json_t *obj);
const char *rd_json_object_key_at(const rd_json_t *obj, size_t i);
/* Any finite number. */
bool rd_json_number(const rd_json_t *j, double *out);
size_t rd_json_array_size(const rd_json_t *j);
rd_json_t *rd_json_array_at(const rd_json_t *j, size_t i);
/* Walking an array in order, O(1) a step (array_at is O(i)): its first
 * element (NULL when empty or not an array), then the one after item. */
rd_json_t *rd_json_array_first(const rd_json_t *j);
rd_json_t *rd_json_next(const rd_json_t *item);

/* Building. set_* and append take ownership of item/value nodes. */
rd_json_t *rd_json_new_object(void);
rd_json_t *rd_json_new_array(void);
/* An integer node, for rd_json_append. */
rd_json_t *rd_json_new_int(long long value);
void rd_json_set(rd_json_t *obj, const char *name, rd_json_t *item);
void rd_json_set_string(rd_json_t *obj, const char *name, const char *value);
/* The set_string functions always write valid JSON: bytes that are not
 * UTF-8 are written as U+FFFD (each byte that does not start a valid
 * sequence becomes one U+FFFD); set_stringn is binary-safe: NUL bytes in
 * value are written as \u0000. */
void rd_json_set_stringn(rd_json_t *obj, const char *name, const char *value, size_t len);
void rd_json_set_int(rd_json_t *obj, const char *name, long long value);
void rd_json_set_bool(rd_json_t *obj, const char *name, bool value);
void rd_json_set_null(rd_json_t *obj, const char *name);
void rd_json_append(rd_json_t *array, rd_json_t *item);

/* Compact text of j; the caller frees it with rd_free. */
char *rd_json_print(const rd_json_t *j, size_t *len);

#endif
