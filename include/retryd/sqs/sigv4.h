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

/* Reads FILE: one key per line, "ACCESS_KEY_ID SECRET [roles=R,...]
 * [queue-pattern ...]" separated by blanks (glob patterns on queue names,
 * fnmatch; none = every queue; roles= the API's roles, docs/security.md
 * "Tokens", admin without it); blank lines and lines starting with '#' are
 * skipped. An id is
 * 1-128 of A-Z a-z 0-9 _ -, a secret 1-256 of those and + / = . ~, a line at
 * most 4096 bytes; an id may appear once. Returns NULL with why[] naming the
 * line number and what is wrong (never the secret), also for a file with no
 * key. The secrets are wiped (OPENSSL_cleanse) by rd_sqs_keys_free. */
rd_sqs_keys_t *rd_sqs_keys_load(const char *path, char *why, size_t why_len);
void rd_sqs_keys_free(rd_sqs_keys_t *keys);
size_t rd_sqs_keys_count(const rd_sqs_keys_t *keys);

/* Checks req's signature (service "sqs", any region the request names) at
 * time now_s (Unix seconds): the Authorization header form or the presigned
 * query form (X-Amz-Algorithm ... X-Amz-Signature), exactly as
 * docs/sqs.md "Authentication" describes. The payload hash is always the
 * SHA-256 of req->body: x-amz-content-sha256 may repeat it, and
 * UNSIGNED-PAYLOAD passes only without a body. Returns NULL and *key (valid
 * as long as keys) when the signature is good; else *key = NULL and the
 * error to answer, with why[] a message in AWS's wording fit for the client
 * (never the secret):
 *   MISSING_AUTH_TOKEN        neither form is present;
 *   INCOMPLETE_SIGNATURE      a malformed one: a part missing, a bad date or
 *                             credential, host (or the date header) not
 *                             signed, a signed header absent, both forms;
 *   INVALID_CLIENT_TOKEN_ID   an access key id not in keys;
 *   SIGNATURE_DOES_NOT_MATCH  a wrong signature, a scope that is not
 *                             DATE/REGION/sqs/aws4_request with the request's
 *                             day, or a request time more than 15 minutes
 *                             off (SQS's own answer: "Signature expired: ...");
 *   REQUEST_EXPIRED           a presigned URL past X-Amz-Date + X-Amz-Expires.
 * Needs the server's keep_headers (req->headers). */
const rd_sqs_error_t *rd_sqs_sigv4_check(const rd_sqs_keys_t *keys, const rd_http_request_t *req,
                                          long long now_s, const rd_sqs_key_t **key, char *why,
                                          size_t why_len);

/* The part of that check a request's head allows, before its body is read
 * (the listener's head check): everything but the payload hash and the
 * signature itself, so a request without a known access key, or with a
 * malformed, stale or misscoped signature, is refused without holding its
 * body. NULL when the full check may yet pass; else the error, as above. */
const rd_sqs_error_t *rd_sqs_sigv4_check_head(const rd_sqs_keys_t *keys,
                                               const rd_http_request_t *req, long long now_s,
                                               char *why, size_t why_len);

/* The same check for another service name in the credential scope (the
 * AWS SigV4 test suite signs for "service"); rd_sqs_sigv4_check is this
 * with "sqs". */
const rd_sqs_error_t *rd_sqs_sigv4_check_service(const rd_sqs_keys_t *keys,
                                                  const rd_http_request_t *req, const char *service,
                                                  long long now_s, const rd_sqs_key_t **key,
                                                  char *why, size_t why_len);

/* The key's id (for SenderId), and whether it may use queue name[0..len). */
const char *rd_sqs_key_id(const rd_sqs_key_t *key);
bool rd_sqs_key_allows(const rd_sqs_key_t *key, const char *name, size_t len);
/* The key's roles (tokens.h rd_role_t bits): its roles= field, else admin. */
unsigned rd_sqs_key_roles(const rd_sqs_key_t *key);

#endif
