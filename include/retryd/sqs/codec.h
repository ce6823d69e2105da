/* sqs/codec.h - the SQS wire protocols: a request in, an answer out
 * (docs/sqs.md "One engine, a second face").
 *
 * Decoding turns a request of either protocol into an rd_sqs_call_t;
 * encoding writes a result given in the JSON protocol's output shape (the
 * same cJSON tree for both protocols) as that protocol's answer: JSON as is
 * for the JSON protocol, XML (libxml2's xmlwriter) with SQS's element names,
 * flattened lists and ResponseMetadata for the query protocol. */
#ifndef RETRYD_SQS_CODEC_H
#define RETRYD_SQS_CODEC_H

#include <stddef.h>

#include "retryd/buf.h"
#include "retryd/sqs/call.h"
#include "retryd/sqs/errors.h"

/* What the request head says. content_type and target (X-Amz-Target) may be
 * NULL; query (without '?') may be NULL; body is body_len bytes. */
typedef struct rd_sqs_wire {
    const char *content_type;
    const char *target;
    const char *query;
    size_t query_len;
    const char *body;
    size_t body_len;
} rd_sqs_wire_t;

/* The protocol of a request, from its head alone: JSON with an X-Amz-Target
 * or the application/x-amz-json-1.0 Content-Type, else query. */
rd_sqs_protocol_t rd_sqs_wire_protocol(const rd_sqs_wire_t *w);

/* Decodes w into *out (out->params owned by the caller: rd_sqs_call_clear).
 * Returns NULL, or the error to answer (MALFORMED_QUERY, SERIALIZATION,
 * MISSING_PARAMETER for no action, INVALID_ACTION for an unknown X-Amz-Target
 * shape) with why[] saying what is wrong; out->protocol is set either way so
 * that the error can be answered in the client's protocol, and out->action
 * too once it is known. Never reads past the given lengths. Bytes that are
 * not UTF-8 are kept for the actions to check; a value holding U+0000 (which
 * a cJSON string cannot) is refused: INVALID_MESSAGE_CONTENTS in a
 * MessageBody, INVALID_PARAMETER_VALUE elsewhere, MALFORMED_QUERY in a query
 * parameter's name. The query protocol's Action, Version and X-Amz-* (a
 * presigned query) are not in params; a form body is read when Content-Type
 * is form-urlencoded or absent; at most 2000 parameters. */
const rd_sqs_error_t *rd_sqs_decode(const rd_sqs_wire_t *w, rd_sqs_call_t *out, char *why,
                                    size_t why_len);
void rd_sqs_call_clear(rd_sqs_call_t *c);

/* NULL when every member of the JSON protocol's params has its model's type
 * (a string, an integer as a number or string, a list of strings, a map of
 * strings, message attribute values, a list of entry objects; null counts as
 * absent); else SERIALIZATION with why[] naming the member (sqs/shapes.c).
 * rd_sqs_decode runs it on every JSON body. */
const rd_sqs_error_t *rd_sqs_check_shapes(const cJSON *params, char *why, size_t why_len);

/* Appends the answer to out: result is the action's output in the JSON
 * protocol's shape (NULL: an action with an empty output, e.g. DeleteQueue).
 * *content_type is a static string. */
void rd_sqs_encode_result(rd_buf_t *out, rd_sqs_protocol_t p, const char *action,
                          const cJSON *result, const char *request_id, const char **content_type);

/* Appends the error answer to out and, to headers, the complete header lines
 * it needs ("x-amzn-query-error: <query_code>;Sender\r\n" for JSON).
 * message may be NULL. */
void rd_sqs_encode_error(rd_buf_t *out, rd_buf_t *headers, rd_sqs_protocol_t p,
                         const rd_sqs_error_t *e, const char *message, const char *request_id,
                         const char **content_type);

/* Appends s[0..len) to out as protocol p's answers carry it (NUL-terminated,
 * the NUL not counted in out->len): bytes that are not UTF-8, U+0000 and,
 * for the query protocol's XML, the characters XML 1.0 cannot hold become
 * U+FFFD. Returns whether anything was replaced. An action digests this
 * text (MD5OfBody), never the stored bytes, so that the digest always
 * matches the body the client reads (docs/sqs.md "Errors"). */
bool rd_sqs_wire_text(rd_sqs_protocol_t p, const char *s, size_t len, rd_buf_t *out);

/* The string member name of obj (a decoded call's params or one of its
 * entries), or NULL (absent); a number member is not a string. */
const char *rd_sqs_str(const cJSON *obj, const char *name);

#endif
