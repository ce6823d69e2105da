/* sqs/errors.h - SQS's errors: the code each protocol uses, the HTTP status
 * and who is at fault (docs/sqs.md "Errors"). */
#ifndef RETRYD_SQS_ERRORS_H
#define RETRYD_SQS_ERRORS_H

#include <stdbool.h>

typedef struct rd_sqs_error {
    const char *code;         /* the JSON protocol's __type shape name: "QueueDoesNotExist" */
    const char *query_code;   /* the query protocol's <Code> and x-amzn-query-error:
                                 "AWS.SimpleQueueService.NonExistentQueue" */
    int status;               /* 400, 403, 404, 413, 500, 503 */
    bool sender;              /* Sender (true) or Receiver fault */
} rd_sqs_error_t;

/* The errors retryd answers; each is one constant row in errors.c. */
extern const rd_sqs_error_t RD_SQS_ERR_QUEUE_DOES_NOT_EXIST;
extern const rd_sqs_error_t RD_SQS_ERR_QUEUE_ALREADY_EXISTS;
extern const rd_sqs_error_t RD_SQS_ERR_QUEUE_DELETED_RECENTLY;
extern const rd_sqs_error_t RD_SQS_ERR_INVALID_PARAMETER_VALUE;
extern const rd_sqs_error_t RD_SQS_ERR_INVALID_ATTRIBUTE_NAME;
extern const rd_sqs_error_t RD_SQS_ERR_INVALID_ATTRIBUTE_VALUE;
extern const rd_sqs_error_t RD_SQS_ERR_MISSING_PARAMETER;
extern const rd_sqs_error_t RD_SQS_ERR_INVALID_ACTION;        /* an action SQS does not have */
extern const rd_sqs_error_t RD_SQS_ERR_UNSUPPORTED_OPERATION; /* an SQS action retryd does not serve */
extern const rd_sqs_error_t RD_SQS_ERR_MALFORMED_QUERY;       /* query protocol: a form that does not decode */
extern const rd_sqs_error_t RD_SQS_ERR_SERIALIZATION;         /* JSON protocol: a body that does not parse */
extern const rd_sqs_error_t RD_SQS_ERR_RECEIPT_HANDLE_INVALID;
extern const rd_sqs_error_t RD_SQS_ERR_MESSAGE_NOT_INFLIGHT;
extern const rd_sqs_error_t RD_SQS_ERR_INVALID_MESSAGE_CONTENTS;
extern const rd_sqs_error_t RD_SQS_ERR_EMPTY_BATCH;
extern const rd_sqs_error_t RD_SQS_ERR_TOO_MANY_ENTRIES;
extern const rd_sqs_error_t RD_SQS_ERR_BATCH_IDS_NOT_DISTINCT;
extern const rd_sqs_error_t RD_SQS_ERR_BATCH_TOO_LONG;
extern const rd_sqs_error_t RD_SQS_ERR_INVALID_BATCH_ENTRY_ID;
extern const rd_sqs_error_t RD_SQS_ERR_PURGE_IN_PROGRESS;
extern const rd_sqs_error_t RD_SQS_ERR_TOO_MANY_TAGS;         /* InvalidParameterValue past 50 */
extern const rd_sqs_error_t RD_SQS_ERR_RESOURCE_NOT_FOUND;    /* move tasks */
extern const rd_sqs_error_t RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH;
extern const rd_sqs_error_t RD_SQS_ERR_INVALID_CLIENT_TOKEN_ID;
extern const rd_sqs_error_t RD_SQS_ERR_MISSING_AUTH_TOKEN;
extern const rd_sqs_error_t RD_SQS_ERR_INCOMPLETE_SIGNATURE;
extern const rd_sqs_error_t RD_SQS_ERR_REQUEST_EXPIRED;
extern const rd_sqs_error_t RD_SQS_ERR_ACCESS_DENIED;
extern const rd_sqs_error_t RD_SQS_ERR_REQUEST_TOO_LARGE;      /* a body over the endpoint's limit, 413 */
extern const rd_sqs_error_t RD_SQS_ERR_SERVICE_UNAVAILABLE;
extern const rd_sqs_error_t RD_SQS_ERR_INTERNAL;

#endif
