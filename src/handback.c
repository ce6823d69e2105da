/* handback.c - releases claims whose answer was not delivered (handback.h). */
#include "retryd/handback.h"

#include "retryd/alloc.h"

typedef struct claimed {
    rd_store_t *const *store;
    char *queue;
    size_t queue_len, count;
    rd_message_t *messages;     /* id and lease_token (owned copy) only */
} claimed_t;

static void on_delivered(bool delivered, void *arg)
{
    claimed_t *k = arg;
    if (!delivered && *k->store) {
        rd_store_queue_t q = { .name = k->queue, .len = k->queue_len };
        rd_store_release_orphans(*k->store, q, k->count, k->messages);
    }
    for (size_t i = 0; i < k->count; i++) rd_free((char *)k->messages[i].lease_token.ptr);
    rd_free(k->messages);
    rd_free(k->queue);
    rd_free(k);
}

void rd_handback_if_undelivered(rd_http_exchange_t *ex, rd_store_t *const *store,
                                rd_store_queue_t q, const rd_message_t *messages, size_t count)
{
    claimed_t *k = rd_malloc(sizeof *k);
    k->store = store;
    k->queue = rd_strndup(q.name, q.len);
    k->queue_len = q.len;
    k->count = count;
    k->messages = rd_calloc(count, sizeof *k->messages);
    for (size_t i = 0; i < count; i++) {
        const rd_str_t *token = &messages[i].lease_token;
        rd_message_init(&k->messages[i]);
        k->messages[i].id = messages[i].id;
        k->messages[i].lease_token.ptr = rd_strndup(token->ptr ? token->ptr : "", token->len);
        k->messages[i].lease_token.len = token->len;
    }
    rd_http_on_delivery(ex, on_delivered, k);
}
