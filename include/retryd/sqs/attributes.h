/* sqs/attributes.h - message attributes and SQS's MD5 digests
 * (docs/sqs.md "Messages").
 *
 * Attributes are kept in the record (the enqueue's attributes argument) in
 * the very form MD5OfMessageAttributes digests: for each attribute, sorted by
 * name (bytewise), a 4-byte big-endian length and the name, the same for the
 * DataType, one transport byte (1 String/Number, 2 Binary), and the length and
 * bytes of the value (Binary decoded). So the digest of a stored blob is the
 * MD5 of its bytes, and the blob decodes back to the attributes losslessly. */
#ifndef RETRYD_SQS_ATTRIBUTES_H
#define RETRYD_SQS_ATTRIBUTES_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "retryd/buf.h"

enum { RD_SQS_MAX_ATTRIBUTES = 10 };

/* MD5 of data as 32 lowercase hex digits and a NUL (OpenSSL). */
void rd_sqs_md5_hex(const void *data, size_t len, char out[33]);

/* Validates the JSON-shape MessageAttributes object attrs (name -> {DataType,
 * StringValue | BinaryValue (base64)}) as SQS does (at most 10; names of
 * 1-256 of [A-Za-z0-9_.-], not starting with "AWS." or "Amazon." in any case,
 * no "..", not starting or ending with "."; DataType String, Number or Binary,
 * optionally ".custom"; a Number a decimal number; String values of SQS's
 * allowed characters) and appends the packed blob to out. Returns 0, or -1
 * with why[] naming the attribute and the rule (out then unchanged). A NULL or
 * empty attrs appends nothing. *size gets the bytes SQS counts toward the
 * message size (names, types and values). */
int rd_sqs_attributes_pack(const cJSON *attrs, rd_buf_t *out, size_t *size, char *why,
                           size_t why_len);

/* The blob back as a JSON-shape MessageAttributes object, keeping only names
 * that want() accepts (NULL: all); NULL when the blob does not decode. */
cJSON *rd_sqs_attributes_unpack(const char *blob, size_t len,
                                bool (*want)(const char *name, void *arg), void *arg);

/* The blob's attributes that want() accepts, packed again (a receive that asks
 * for some attributes digests only those, as SQS does): appended to out. */
int rd_sqs_attributes_select(const char *blob, size_t len,
                             bool (*want)(const char *name, void *arg), void *arg,
                             rd_buf_t *out);

/* True when s[0..len) holds only the characters SQS allows in a message body
 * (#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF, valid
 * UTF-8). */
bool rd_sqs_body_chars_ok(const char *s, size_t len);

#endif
