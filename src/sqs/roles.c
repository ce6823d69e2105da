/* sqs/roles.c - the role each SQS action needs (docs/security.md "Tokens"),
 * checked against the roles= field of the request's --sqs-credentials key. */
#include "retryd/sqs/roles.h"

#include <string.h>

#include "retryd/tokens.h"

unsigned rd_sqs_action_role(const char *action)
{
    static const struct {
        const char *action;
        unsigned role;
    } table[] = {
        { "GetQueueUrl", RD_ROLE_ANY },
        { "SendMessage", RD_ROLE_PRODUCER },
        { "SendMessageBatch", RD_ROLE_PRODUCER },
        { "ReceiveMessage", RD_ROLE_WORKER },
        { "DeleteMessage", RD_ROLE_WORKER },
        { "DeleteMessageBatch", RD_ROLE_WORKER },
        { "ChangeMessageVisibility", RD_ROLE_WORKER },
        { "ChangeMessageVisibilityBatch", RD_ROLE_WORKER },
        { "GetQueueAttributes", RD_ROLE_READER },
        { "ListQueues", RD_ROLE_READER },
        { "ListQueueTags", RD_ROLE_READER },
        { "ListDeadLetterSourceQueues", RD_ROLE_READER },
        { "ListMessageMoveTasks", RD_ROLE_READER },
        { "CreateQueue", RD_ROLE_OPERATOR },
        { "DeleteQueue", RD_ROLE_OPERATOR },
        { "PurgeQueue", RD_ROLE_OPERATOR },
        { "SetQueueAttributes", RD_ROLE_OPERATOR },
        { "TagQueue", RD_ROLE_OPERATOR },
        { "UntagQueue", RD_ROLE_OPERATOR },
        { "StartMessageMoveTask", RD_ROLE_OPERATOR },
        { "CancelMessageMoveTask", RD_ROLE_OPERATOR },
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].action, action) == 0) return table[i].role;
    return RD_ROLE_ADMIN;
}
