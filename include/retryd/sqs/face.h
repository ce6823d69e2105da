/* sqs/face.h - what the SQS actions share (src/sqs/): one request being
 * served, its answer, and the endpoint's state. Only src/sqs/ includes it. */
#ifndef RETRYD_SQS_FACE_H
#define RETRYD_SQS_FACE_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/http.h"
#include "retryd/sqs.h"
#include "retryd/sqs/call.h"
#include "retryd/sqs/codec.h"
#include "retryd/sqs/errors.h"
#include "retryd/sqs/sigv4.h"
#include "retryd/store.h"

/* SQS's limits (docs/sqs.md). */
enum {
    RD_SQS_BODY_MAX = 262144,          /* a message, or a whole batch */
    RD_SQS_BATCH_MAX = 10,
    RD_SQS_QUEUE_NAME_MAX = 80,
    RD_SQS_VISIBILITY_MAX = 43200,
    RD_SQS_DELAY_MAX = 900,
    RD_SQS_WAIT_MAX = 20,
    RD_SQS_TAGS_MAX = 50,
};

struct rd_sqs {
    uv_loop_t *loop;
    rd_http_server_t *http;
    rd_store_t *store;                 /* NULL once forgotten */
    rd_coalescer_t *coalescer;
    rd_enqueue_lines_t *enqueues;      /* SendMessage goes through it (NULL: the store) */
    rd_waiters_t *waiters;
    rd_moves_t *moves;                 /* message move tasks (moves.c) */
    rd_sqs_keys_t *keys;               /* NULL: no signature check */
    char account[16];
    char region[32];
    char origin[96];                   /* "http://host:port", the queue URLs' */
    long long default_lease_ms;
    /* /metrics: requests per action row, errors per code. */
    unsigned long long *action_requests;
    unsigned long long other_requests;  /* undecodable, or an action not in the table */
    struct { const char *code; unsigned long long n; } errors[48];
    size_t error_kinds;
    void (*on_drained)(void *arg);
    void *drained_arg;
};

typedef struct rd_sqs_req rd_sqs_req_t;
typedef void (*rd_sqs_action_fn)(rd_sqs_req_t *r);

/* One action: its name, whether it names a queue (QueueUrl, or the request
 * path), and its handler. */
typedef struct rd_sqs_action {
    const char *name;
    bool needs_queue;
    rd_sqs_action_fn handler;
} rd_sqs_action_t;

/* The action table (actions.c): every action SQS has that retryd serves. */
extern const rd_sqs_action_t rd_sqs_actions[];
extern const size_t rd_sqs_action_count;
/* The row of name, or NULL. */
const rd_sqs_action_t *rd_sqs_action_find(const char *name, size_t *index);
/* True for an action SQS has that retryd does not serve (AddPermission...). */
bool rd_sqs_action_known_unserved(const char *name);

/* A request while it is served: from the listener's decode to the one
 * answer (rd_sqs_answer or rd_sqs_fail), which frees it. */
struct rd_sqs_req {
    rd_sqs_t *sqs;
    rd_http_exchange_t *ex;
    rd_sqs_call_t call;
    const rd_sqs_action_t *action;
    const rd_sqs_key_t *key;           /* the signer, NULL without credentials */
    char request_id[40];
    char *queue;                       /* the queue named (owned), needs_queue rows */
    size_t queue_len;
    bool fifo;                         /* the name ends in ".fifo" */
    void *state;                       /* the action's own, freed by free_state */
    void (*free_state)(void *state);
};

/* The queue as the store takes it. */
rd_store_queue_t rd_sqs_queue(const rd_sqs_req_t *r);

/* Answers result (the JSON protocol's output shape; NULL for none, taken and
 * freed) and frees r. */
void rd_sqs_answer(rd_sqs_req_t *r, cJSON *result);
/* Answers the error (message printf-style, may be NULL) and frees r. */
void rd_sqs_fail(rd_sqs_req_t *r, const rd_sqs_error_t *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* For a store result that is not OK: answers the matching SQS error and
 * returns true; false (nothing done) for RD_STORE_OK. */
bool rd_sqs_store_failed(rd_sqs_req_t *r, const rd_store_head_t *head);
/* A store call that could not be sent (rc -1): ServiceUnavailable. */
void rd_sqs_started(rd_sqs_req_t *r, int rc);

/* ---- parameters (params.c) ---- */

/* Reads an integer member (a JSON number, or a string of digits as the query
 * protocol sends) in min..max into *out; absent leaves *out and answers
 * true. A bad value fails the request (InvalidParameterValue naming it) and
 * answers false. */
bool rd_sqs_int(rd_sqs_req_t *r, const cJSON *obj, const char *name, long long min,
                long long max, long long *out);
/* A boolean member ("true"/"false" or JSON true/false); as rd_sqs_int. */
bool rd_sqs_bool(rd_sqs_req_t *r, const cJSON *obj, const char *name, bool *out);
/* A required string member: NULL after failing the request with
 * MissingParameter. */
const char *rd_sqs_required(rd_sqs_req_t *r, const cJSON *obj, const char *name);

/* ---- names and handles (names.c) ---- */

/* The queue URL of name into out (cap bytes). */
void rd_sqs_queue_url(const rd_sqs_t *sqs, const char *name, size_t len, char *out, size_t cap);
/* The ARN of name. */
void rd_sqs_queue_arn(const rd_sqs_t *sqs, const char *name, size_t len, char *out, size_t cap);
/* The queue name a queue URL (or an ARN, arn == true) names: a pointer into
 * s and its length, or NULL when s is not one of this endpoint's accounts. */
const char *rd_sqs_name_of_url(const rd_sqs_t *sqs, const char *s, size_t *len);
const char *rd_sqs_name_of_arn(const rd_sqs_t *sqs, const char *s, size_t *len);
/* SQS's rule for queue names: 1-80 of [A-Za-z0-9_-], and ".fifo" at the end
 * for a FIFO queue (counted in the 80). */
bool rd_sqs_queue_name_ok(const char *name, size_t len);
/* The MessageId of message id of queue name (UUID-shaped, the same for the
 * same message): out holds 37 bytes. */
void rd_sqs_message_id(const char *queue, size_t queue_len, long long id, char out[37]);
/* ReceiptHandle: base64 of "<queue tag>:<id>:<lease token>", the tag the
 * 8 hex digits that start the queue's MessageIds. rd_sqs_handle_decode
 * answers false for anything else, a handle of another queue included. */
void rd_sqs_handle_encode(const char *queue, size_t queue_len, long long id, const char *token,
                          size_t token_len, rd_buf_t *out);
bool rd_sqs_handle_decode(const char *handle, const char *queue, size_t queue_len, long long *id,
                          char *token, size_t token_cap);
/* The predecessor cursor of a name for queues_page (its pages start after
 * the cursor): the greatest queue name below every name starting with
 * prefix (len > 0). out holds RD_SQS_CURSOR_MAX bytes; returns its length. */
enum { RD_SQS_CURSOR_MAX = 260 };
size_t rd_sqs_cursor_before(const char *prefix, size_t len, char *out);

/* Runs then(r) once the registry said that queue name[0..len) exists (it
 * uses r->state meanwhile: call it before setting any); a queue that does
 * not exist is answered QueueDoesNotExist, a failure its error. */
typedef void (*rd_sqs_exists_fn)(rd_sqs_req_t *r);
void rd_sqs_queue_exists(rd_sqs_req_t *r, const char *name, size_t len, rd_sqs_exists_fn then);

/* ---- the actions (queues.c, admin.c, messages.c, moves.c) ---- */
void rd_sqs_create_queue(rd_sqs_req_t *r);
void rd_sqs_get_queue_url(rd_sqs_req_t *r);
void rd_sqs_list_queues(rd_sqs_req_t *r);
void rd_sqs_delete_queue(rd_sqs_req_t *r);
void rd_sqs_get_queue_attributes(rd_sqs_req_t *r);
void rd_sqs_set_queue_attributes(rd_sqs_req_t *r);
void rd_sqs_purge_queue(rd_sqs_req_t *r);
void rd_sqs_tag_queue(rd_sqs_req_t *r);
void rd_sqs_untag_queue(rd_sqs_req_t *r);
void rd_sqs_list_queue_tags(rd_sqs_req_t *r);
void rd_sqs_list_dead_letter_source_queues(rd_sqs_req_t *r);
void rd_sqs_send_message(rd_sqs_req_t *r);
void rd_sqs_send_message_batch(rd_sqs_req_t *r);
void rd_sqs_receive_message(rd_sqs_req_t *r);
void rd_sqs_delete_message(rd_sqs_req_t *r);
void rd_sqs_delete_message_batch(rd_sqs_req_t *r);
void rd_sqs_change_message_visibility(rd_sqs_req_t *r);
void rd_sqs_change_message_visibility_batch(rd_sqs_req_t *r);
void rd_sqs_start_message_move_task(rd_sqs_req_t *r);
void rd_sqs_list_message_move_tasks(rd_sqs_req_t *r);
void rd_sqs_cancel_message_move_task(rd_sqs_req_t *r);

#endif
