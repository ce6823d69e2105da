/* sqs/shapes.c - the JSON protocol's members must have their model's type
 * (docs/sqs.md "Errors"): a list where a map belongs, a number in a list of
 * names, an entry that is not an object. The query protocol builds its
 * members itself (decode.c), so only a JSON body can get them wrong, and
 * the actions may then read each member by its type without checking.
 *
 * SQS answers a body of the wrong shape with SerializationException; so does
 * retryd, naming the member. Integers may also be strings, and any member
 * may be null (absent), as the actions have always read them. */
#include "retryd/sqs/codec.h"

#include <stdio.h>
#include <string.h>

typedef enum shape {
    SHAPE_STRING,       /* a string */
    SHAPE_INTEGER,      /* a number or a string (the actions check the range) */
    SHAPE_BOOLEAN,      /* true/false or "true"/"false" (the actions check it) */
    SHAPE_STRING_LIST,  /* [string, ...] */
    SHAPE_STRING_MAP,   /* {name: string, ...} */
    SHAPE_ATTRIBUTES,   /* {name: {DataType, StringValue, ...}, ...} */
    SHAPE_ENTRIES,      /* [{member: ..., ...}, ...], each entry checked by this table */
} shape_t;

static const struct { const char *member; shape_t shape; } MEMBERS[] = {
    { "QueueUrl", SHAPE_STRING },
    { "QueueName", SHAPE_STRING },
    { "QueueNamePrefix", SHAPE_STRING },
    { "QueueOwnerAWSAccountId", SHAPE_STRING },
    { "NextToken", SHAPE_STRING },
    { "MessageBody", SHAPE_STRING },
    { "ReceiptHandle", SHAPE_STRING },
    { "Id", SHAPE_STRING },
    { "MessageDeduplicationId", SHAPE_STRING },
    { "MessageGroupId", SHAPE_STRING },
    { "ReceiveRequestAttemptId", SHAPE_STRING },
    { "Label", SHAPE_STRING },
    { "SourceArn", SHAPE_STRING },
    { "DestinationArn", SHAPE_STRING },
    { "TaskHandle", SHAPE_STRING },
    { "DelaySeconds", SHAPE_INTEGER },
    { "MaxNumberOfMessages", SHAPE_INTEGER },
    { "VisibilityTimeout", SHAPE_INTEGER },
    { "WaitTimeSeconds", SHAPE_INTEGER },
    { "MaxResults", SHAPE_INTEGER },
    { "MaxNumberOfMessagesPerSecond", SHAPE_INTEGER },
    { "AttributeNames", SHAPE_STRING_LIST },
    { "MessageAttributeNames", SHAPE_STRING_LIST },
    { "MessageSystemAttributeNames", SHAPE_STRING_LIST },
    { "TagKeys", SHAPE_STRING_LIST },
    { "AWSAccountIds", SHAPE_STRING_LIST },
    { "Actions", SHAPE_STRING_LIST },
    { "Attributes", SHAPE_STRING_MAP },
    { "Tags", SHAPE_STRING_MAP },
    { "tags", SHAPE_STRING_MAP },
    { "MessageAttributes", SHAPE_ATTRIBUTES },
    { "MessageSystemAttributes", SHAPE_ATTRIBUTES },
    { "Entries", SHAPE_ENTRIES },
};

/* The members of one MessageAttributeValue. */
static const struct { const char *member; shape_t shape; } VALUE_MEMBERS[] = {
    { "DataType", SHAPE_STRING },
    { "StringValue", SHAPE_STRING },
    { "BinaryValue", SHAPE_STRING },
    { "StringListValues", SHAPE_STRING_LIST },
    { "BinaryListValues", SHAPE_STRING_LIST },
};

static const char *const SHAPE_NAMES[] = {
    "a string", "an integer", "a boolean", "a list of strings", "a map of strings",
    "a map of message attribute values", "a list of entries",
};

static bool is_string_list(const cJSON *v)
{
    if (!cJSON_IsArray(v)) return false;
    const cJSON *it;
    cJSON_ArrayForEach(it, v)
        if (!cJSON_IsString(it)) return false;
    return true;
}

static bool is_string_map(const cJSON *v)
{
    if (!cJSON_IsObject(v)) return false;
    const cJSON *it;
    cJSON_ArrayForEach(it, v)
        if (!cJSON_IsString(it)) return false;
    return true;
}

static bool check_object(const cJSON *obj, bool in_entry, char *why, size_t why_len);

static bool attribute_value_ok(const cJSON *v)
{
    if (!cJSON_IsObject(v)) return false;
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        if (cJSON_IsNull(m)) continue;
        for (size_t i = 0; i < sizeof VALUE_MEMBERS / sizeof VALUE_MEMBERS[0]; i++) {
            if (strcmp(m->string, VALUE_MEMBERS[i].member) != 0) continue;
            if (VALUE_MEMBERS[i].shape == SHAPE_STRING ? !cJSON_IsString(m) : !is_string_list(m))
                return false;
        }
    }
    return true;
}

static bool shape_ok(const cJSON *v, shape_t shape, char *why, size_t why_len)
{
    const cJSON *it;
    switch (shape) {
    case SHAPE_STRING: return cJSON_IsString(v);
    case SHAPE_INTEGER: return cJSON_IsNumber(v) || cJSON_IsString(v);
    case SHAPE_BOOLEAN: return cJSON_IsBool(v) || cJSON_IsString(v);
    case SHAPE_STRING_LIST: return is_string_list(v);
    case SHAPE_STRING_MAP: return is_string_map(v);
    case SHAPE_ATTRIBUTES:
        if (!cJSON_IsObject(v)) return false;
        cJSON_ArrayForEach(it, v)
            if (!attribute_value_ok(it)) return false;
        return true;
    case SHAPE_ENTRIES:
        if (!cJSON_IsArray(v)) return false;
        cJSON_ArrayForEach(it, v) {
            if (!cJSON_IsObject(it)) return false;
            /* An entry's own member of the wrong shape names itself. */
            if (!check_object(it, true, why, why_len)) return true;
        }
        return true;
    }
    return false;
}

/* False with why[] set when a member of obj has the wrong shape. */
static bool check_object(const cJSON *obj, bool in_entry, char *why, size_t why_len)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, obj) {
        if (cJSON_IsNull(m)) continue;
        for (size_t i = 0; i < sizeof MEMBERS / sizeof MEMBERS[0]; i++) {
            if (strcmp(m->string, MEMBERS[i].member) != 0) continue;
            if (in_entry && MEMBERS[i].shape == SHAPE_ENTRIES) break;  /* no nesting */
            why[0] = '\0';
            bool ok = shape_ok(m, MEMBERS[i].shape, why, why_len);
            if (why[0]) return false;
            if (!ok) {
                snprintf(why, why_len, "%s%s must be %s", in_entry ? "An entry's " : "",
                         MEMBERS[i].member, SHAPE_NAMES[MEMBERS[i].shape]);
                return false;
            }
            break;
        }
    }
    return true;
}

const rd_sqs_error_t *rd_sqs_check_shapes(const cJSON *params, char *why, size_t why_len)
{
    char local[256];
    if (why == NULL || why_len == 0) {
        why = local;
        why_len = sizeof local;
    }
    return check_object(params, false, why, why_len) ? NULL : &RD_SQS_ERR_SERIALIZATION;
}
