/* sqs/roles.h - the role each SQS action needs from a --sqs-credentials key
 * (docs/security.md "Tokens"; the roles are the API's, tokens.h). */
#ifndef RETRYD_SQS_ROLES_H
#define RETRYD_SQS_ROLES_H

/* The role (one rd_role_t bit, or RD_ROLE_ANY) action needs: SendMessage*
 * producer; ReceiveMessage, DeleteMessage*, ChangeMessageVisibility* worker;
 * GetQueueAttributes and List* reader; CreateQueue, DeleteQueue, PurgeQueue,
 * SetQueueAttributes, TagQueue, UntagQueue and the message move tasks
 * operator; GetQueueUrl any key (every client looks its queue up first);
 * any other name admin. */
unsigned rd_sqs_action_role(const char *action);

#endif
