/* sqs/call.h - one SQS request, decoded from either wire protocol into one
 * shape (docs/sqs.md "One engine, a second face"): the action's name and its
 * parameters as the JSON protocol names them, so that an action reads its
 * input one way whichever protocol carried it. */
#ifndef RETRYD_SQS_CALL_H
#define RETRYD_SQS_CALL_H

#include <cjson/cJSON.h>

typedef enum rd_sqs_protocol {
    RD_SQS_QUERY,   /* form-encoded Action=..., XML answers (awscli 2.9, boto3 1.26) */
    RD_SQS_JSON,    /* application/x-amz-json-1.0 + X-Amz-Target: AmazonSQS.<Action> */
} rd_sqs_protocol_t;

typedef struct rd_sqs_call {
    rd_sqs_protocol_t protocol;
    char action[64];          /* "SendMessage"; "" when the request named none */
    /* The input in the JSON protocol's shape, an object: "QueueUrl": "...",
     * "Attributes": {"VisibilityTimeout": "30"}, "MessageAttributes":
     * {"n": {"DataType": "String", "StringValue": "v"}}, "Entries": [{...}],
     * "AttributeNames": ["All"], "Tags": {"k": "v"} (CreateQueue's member
     * is "tags", as in SQS's model), "TagKeys": ["k"].
     * From the query protocol every scalar is a string; from the JSON
     * protocol numbers and booleans stay what the client sent. Binary values
     * are base64 text in both. */
    cJSON *params;
} rd_sqs_call_t;

#endif
