/* actions.c - the SQS endpoint's action table (docs/sqs.md, the action
 * table): one row per action retryd serves, with its handler. */
#include <string.h>

#include "retryd/sqs/face.h"

const rd_sqs_action_t rd_sqs_actions[] = {
    { "CreateQueue", false, rd_sqs_create_queue },
    { "GetQueueUrl", false, rd_sqs_get_queue_url },
    { "ListQueues", false, rd_sqs_list_queues },
    { "DeleteQueue", true, rd_sqs_delete_queue },
    { "GetQueueAttributes", true, rd_sqs_get_queue_attributes },
    { "SetQueueAttributes", true, rd_sqs_set_queue_attributes },
    { "PurgeQueue", true, rd_sqs_purge_queue },
    { "TagQueue", true, rd_sqs_tag_queue },
    { "UntagQueue", true, rd_sqs_untag_queue },
    { "ListQueueTags", true, rd_sqs_list_queue_tags },
    { "ListDeadLetterSourceQueues", true, rd_sqs_list_dead_letter_source_queues },
    { "SendMessage", true, rd_sqs_send_message },
    { "SendMessageBatch", true, rd_sqs_send_message_batch },
    { "ReceiveMessage", true, rd_sqs_receive_message },
    { "DeleteMessage", true, rd_sqs_delete_message },
    { "DeleteMessageBatch", true, rd_sqs_delete_message_batch },
    { "ChangeMessageVisibility", true, rd_sqs_change_message_visibility },
    { "ChangeMessageVisibilityBatch", true, rd_sqs_change_message_visibility_batch },
    { "StartMessageMoveTask", false, rd_sqs_start_message_move_task },
    { "ListMessageMoveTasks", false, rd_sqs_list_message_move_tasks },
    { "CancelMessageMoveTask", false, rd_sqs_cancel_message_move_task },
};
const size_t rd_sqs_action_count = sizeof rd_sqs_actions / sizeof rd_sqs_actions[0];

const rd_sqs_action_t *rd_sqs_action_find(const char *name, size_t *index)
{
    for (size_t i = 0; i < rd_sqs_action_count; i++)
        if (strcmp(rd_sqs_actions[i].name, name) == 0) {
            *index = i;
            return &rd_sqs_actions[i];
        }
    return NULL;
}

/* SQS's actions that retryd does not serve: access policies (retryd's
 * access is --sqs-credentials' patterns). They answer UnsupportedOperation,
 * any other name InvalidAction. */
bool rd_sqs_action_known_unserved(const char *name)
{
    static const char *const unserved[] = { "AddPermission", "RemovePermission" };
    for (size_t i = 0; i < sizeof unserved / sizeof unserved[0]; i++)
        if (strcmp(unserved[i], name) == 0) return true;
    return false;
}
