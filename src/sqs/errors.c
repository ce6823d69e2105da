/* sqs/errors.c - SQS's errors (docs/sqs.md "Errors"). STOPGAP in the
 * sqs-sigv4 branch: only the authentication rows, so sigv4.c links before
 * the codec's errors.c (which has every row of errors.h) is merged; the
 * lead keeps the codec's copy. */
#include "retryd/sqs/errors.h"

const rd_sqs_error_t RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH = { "SignatureDoesNotMatch",
                                                             "SignatureDoesNotMatch", 403, true };
const rd_sqs_error_t RD_SQS_ERR_INVALID_CLIENT_TOKEN_ID = { "InvalidClientTokenId",
                                                            "InvalidClientTokenId", 403, true };
const rd_sqs_error_t RD_SQS_ERR_MISSING_AUTH_TOKEN = { "MissingAuthenticationToken",
                                                       "MissingAuthenticationToken", 403, true };
const rd_sqs_error_t RD_SQS_ERR_INCOMPLETE_SIGNATURE = { "IncompleteSignature",
                                                         "IncompleteSignature", 400, true };
const rd_sqs_error_t RD_SQS_ERR_REQUEST_EXPIRED = { "RequestExpired", "RequestExpired", 400, true };
const rd_sqs_error_t RD_SQS_ERR_ACCESS_DENIED = { "AccessDenied", "AccessDenied", 403, true };
