/* params.c - reading an action's parameters from the decoded call: one
 * reader per kind, so each range and each error message is written once. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/sqs/face.h"

bool rd_sqs_int(rd_sqs_req_t *r, const cJSON *obj, const char *name, long long min,
                long long max, long long *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (v == NULL || cJSON_IsNull(v)) return true;
    long long n = 0;
    bool ok = false;
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        ok = d >= (double)min && d <= (double)max && d == (double)(long long)d;
        n = (long long)d;
    } else if (cJSON_IsString(v) && v->valuestring[0]) {
        char *end = NULL;
        errno = 0;
        n = strtoll(v->valuestring, &end, 10);
        ok = errno == 0 && *end == '\0' && n >= min && n <= max;
    }
    if (!ok) {
        rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                    "Value for parameter %s is invalid. Reason: must be an integer from %lld "
                    "to %lld.", name, min, max);
        return false;
    }
    *out = n;
    return true;
}

bool rd_sqs_bool(rd_sqs_req_t *r, const cJSON *obj, const char *name, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (v == NULL || cJSON_IsNull(v)) return true;
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
        return true;
    }
    if (cJSON_IsString(v) && (strcmp(v->valuestring, "true") == 0 ||
                              strcmp(v->valuestring, "false") == 0)) {
        *out = v->valuestring[0] == 't';
        return true;
    }
    rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                "Value for parameter %s is invalid. Reason: must be true or false.", name);
    return false;
}

const char *rd_sqs_required(rd_sqs_req_t *r, const cJSON *obj, const char *name)
{
    const char *s = rd_sqs_str(obj, name);
    if (s == NULL)
        rd_sqs_fail(r, &RD_SQS_ERR_MISSING_PARAMETER,
                    "The request must contain the parameter %s.", name);
    return s;
}
