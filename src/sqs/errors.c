/* sqs/errors.c - SQS's errors, one row each (docs/sqs.md "Errors").
 *
 * code is the JSON protocol's error shape (the `__type` after
 * "com.amazonaws.sqs#"), query_code what the query protocol's <Code> and the
 * JSON protocol's x-amzn-query-error header carry (SQS has the
 * awsQueryCompatible trait: SDKs of the JSON protocol map the header's code
 * back to the modelled error). Codes and statuses are those of the SQS model
 * as botocore (service-2.json, "error" traits) and @aws-sdk/client-sqs 3.x
 * (awsQueryError traits) ship it; errors the model does not list (the common
 * errors of every AWS query API) are from the SQS API reference's "Common
 * Errors", where the code is the same in both protocols. */
#include "retryd/sqs/errors.h"

#define ROW(name, code_, query_code_, status_, sender_)                                   \
    const rd_sqs_error_t name = { .code = code_, .query_code = query_code_,              \
                                  .status = status_, .sender = sender_ }

/* Modelled errors: shape name / awsQueryError code. */
ROW(RD_SQS_ERR_QUEUE_DOES_NOT_EXIST, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue",
    400, true);
ROW(RD_SQS_ERR_QUEUE_ALREADY_EXISTS, "QueueNameExists", "QueueAlreadyExists", 400, true);
ROW(RD_SQS_ERR_QUEUE_DELETED_RECENTLY, "QueueDeletedRecently",
    "AWS.SimpleQueueService.QueueDeletedRecently", 400, true);
ROW(RD_SQS_ERR_INVALID_ATTRIBUTE_NAME, "InvalidAttributeName", "InvalidAttributeName", 400, true);
ROW(RD_SQS_ERR_INVALID_ATTRIBUTE_VALUE, "InvalidAttributeValue", "InvalidAttributeValue", 400, true);
ROW(RD_SQS_ERR_UNSUPPORTED_OPERATION, "UnsupportedOperation",
    "AWS.SimpleQueueService.UnsupportedOperation", 400, true);
/* The model's awsQueryError gives 404 here, not the 400 of the API reference's prose. */
ROW(RD_SQS_ERR_RECEIPT_HANDLE_INVALID, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404, true);
ROW(RD_SQS_ERR_MESSAGE_NOT_INFLIGHT, "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight",
    400, true);
ROW(RD_SQS_ERR_INVALID_MESSAGE_CONTENTS, "InvalidMessageContents", "InvalidMessageContents", 400, true);
ROW(RD_SQS_ERR_EMPTY_BATCH, "EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", 400, true);
ROW(RD_SQS_ERR_TOO_MANY_ENTRIES, "TooManyEntriesInBatchRequest",
    "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400, true);
ROW(RD_SQS_ERR_BATCH_IDS_NOT_DISTINCT, "BatchEntryIdsNotDistinct",
    "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400, true);
ROW(RD_SQS_ERR_BATCH_TOO_LONG, "BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", 400,
    true);
ROW(RD_SQS_ERR_INVALID_BATCH_ENTRY_ID, "InvalidBatchEntryId",
    "AWS.SimpleQueueService.InvalidBatchEntryId", 400, true);
ROW(RD_SQS_ERR_PURGE_IN_PROGRESS, "PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress",
    403, true);
ROW(RD_SQS_ERR_RESOURCE_NOT_FOUND, "ResourceNotFoundException", "ResourceNotFoundException", 404, true);

/* Common errors of the query APIs: the same code in both protocols. */
ROW(RD_SQS_ERR_INVALID_PARAMETER_VALUE, "InvalidParameterValue", "InvalidParameterValue", 400, true);
/* SQS answers more than 50 tags with InvalidParameterValue; a row of its own
 * so that the action names the rule, the wire code is the same. */
ROW(RD_SQS_ERR_TOO_MANY_TAGS, "InvalidParameterValue", "InvalidParameterValue", 400, true);
ROW(RD_SQS_ERR_MISSING_PARAMETER, "MissingParameter", "MissingParameter", 400, true);
ROW(RD_SQS_ERR_INVALID_ACTION, "InvalidAction", "InvalidAction", 400, true);
ROW(RD_SQS_ERR_MALFORMED_QUERY, "MalformedQueryString", "MalformedQueryString", 404, true);
ROW(RD_SQS_ERR_SERIALIZATION, "SerializationException", "SerializationException", 400, true);
/* A body over the endpoint's read limit (docs/sqs.md "Errors"): not read,
 * so only the head tells the protocol and (JSON) the action. */
ROW(RD_SQS_ERR_REQUEST_TOO_LARGE, "RequestEntityTooLarge", "RequestEntityTooLarge", 413, true);
ROW(RD_SQS_ERR_SERVICE_UNAVAILABLE, "ServiceUnavailable", "ServiceUnavailable", 503, false);
ROW(RD_SQS_ERR_INTERNAL, "InternalFailure", "InternalFailure", 500, false);

/* Authentication (docs/sqs.md "Authentication"). */
ROW(RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH, "SignatureDoesNotMatch", "SignatureDoesNotMatch", 403, true);
ROW(RD_SQS_ERR_INVALID_CLIENT_TOKEN_ID, "InvalidClientTokenId", "InvalidClientTokenId", 403, true);
ROW(RD_SQS_ERR_MISSING_AUTH_TOKEN, "MissingAuthenticationToken", "MissingAuthenticationToken", 403,
    true);
ROW(RD_SQS_ERR_INCOMPLETE_SIGNATURE, "IncompleteSignature", "IncompleteSignature", 400, true);
ROW(RD_SQS_ERR_REQUEST_EXPIRED, "RequestExpired", "RequestExpired", 400, true);
ROW(RD_SQS_ERR_ACCESS_DENIED, "AccessDenied", "AccessDenied", 403, true);
