/* sqs/sigv4.h - AWS Signature Version 4 for the SQS endpoint
 * (docs/sqs.md "Authentication"): the keys of --sqs-credentials and the
 * check of a request's signature, in the Authorization header or as a
 * presigned query, with OpenSSL's SHA-256 and HMAC. */
#ifndef RETRYD_SQS_SIGV4_H
#define RETRYD_SQS_SIGV4_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/http.h"
#include "retryd/sqs/errors.h"

typedef struct rd_sqs_key rd_sqs_key_t;
typedef struct rd_sqs_keys rd_sqs_keys_t;

/* Reads FILE: one key per line, "ACCESS_KEY_ID SECRET [queue-pattern ...]"
 * (glob patterns on queue names, fnmatch; none = every queue); blank lines
 * and lines starting with '#' are skipped. Returns NULL with why[] naming the
 * line number and what is wrong (never the secret). */
rd_sqs_keys_t *rd_sqs_keys_load(const char *path, char *why, size_t why_len);
void rd_sqs_keys_free(rd_sqs_keys_t *keys);
size_t rd_sqs_keys_count(const rd_sqs_keys_t *keys);

/* Checks req's signature (service "sqs", any region the request names) at
 * time now_s (Unix seconds). body is the request body (its SHA-256 is the
 * payload hash unless x-amz-content-sha256 gives one). Returns NULL and
 * *key when the signature is good; else the error to answer
 * (MISSING_AUTH_TOKEN without any signature, INCOMPLETE_SIGNATURE for a
 * malformed one, INVALID_CLIENT_TOKEN_ID for an unknown key,
 * SIGNATURE_DOES_NOT_MATCH, REQUEST_EXPIRED for a request time more than 15
 * minutes off or a presigned URL past X-Amz-Expires) with why[] a message
 * fit for the client (no secret in it). Needs the server's keep_headers. */
const rd_sqs_error_t *rd_sqs_sigv4_check(const rd_sqs_keys_t *keys, const rd_http_request_t *req,
                                          long long now_s, const rd_sqs_key_t **key, char *why,
                                          size_t why_len);

/* The key's id (for SenderId), and whether it may use queue name[0..len). */
const char *rd_sqs_key_id(const rd_sqs_key_t *key);
bool rd_sqs_key_allows(const rd_sqs_key_t *key, const char *name, size_t len);

#endif
