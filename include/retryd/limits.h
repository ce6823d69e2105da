/* limits.h - the API's bounds (docs/reference.md "Validation"), each spelled once: request.c checks
 * them and names them in its error messages (RD_LIMIT_STR), config.c bounds
 * its flags with them, and store.c sizes its calls by them. The library's own
 * batch bounds (MAX_BATCH, REPLY_BYTES) are in lua/00_common.lua.
 *
 * Plain decimal literals, so that RD_LIMIT_STR can spell them in text. */
#ifndef RETRYD_LIMITS_H
#define RETRYD_LIMITS_H

#define RD_LIMIT_STR_(x) #x
/* The decimal text of a limit: "lease_seconds ... 1 and " RD_LIMIT_STR(...). */
#define RD_LIMIT_STR(x) RD_LIMIT_STR_(x)

#define RD_MAX_RETRIES_DEFAULT 3
#define RD_MAX_RETRIES_MAX 10
#define RD_LEASE_SECONDS_MAX 43200        /* 12 h: a claim's lease, and --lease-seconds */
#define RD_DELAY_SECONDS_MAX 2592000      /* 30 days: delay_seconds, retry_after_seconds */
#define RD_TTL_SECONDS_MAX 2592000        /* 30 days: an enqueue's ttl_seconds (at least 1) */
#define RD_PRIORITY_MAX 9                 /* an enqueue's priority: 0 (default) to 9 */
#define RD_WAIT_SECONDS_MAX 30            /* a long-poll claim's wait_seconds */
#define RD_CLAIM_COUNT_MAX 100            /* messages per claim */
#define RD_LIST_LIMIT_DEFAULT 100         /* a page of messages (and of GET /queues) */
#define RD_LIST_LIMIT_MAX 1000
#define RD_QUEUE_NAME_MAX 255             /* bytes */
#define RD_IDEMPOTENCY_KEY_MAX 255        /* bytes */
#define RD_LEASE_TOKEN_MAX 128            /* bytes */
#define RD_WORKER_MAX 128                 /* bytes of a claim's worker (docs/reference.md "History") */
#define RD_GROUP_MAX 128                  /* bytes of an enqueue's group (docs/reference.md
                                             "Fairness groups") */
#define RD_ATTRIBUTES_MAX 262144          /* bytes of an enqueue's attributes (lua/10_enqueue.lua) */
#define RD_IDEMPOTENCY_WINDOW_MS_MAX 86400000LL  /* an enqueue's idempotency window: 24 h */
#define RD_TAGS_MAX 50                    /* tags of a queue (lua/66_tags.lua) */
#define RD_GROUPS_LIMIT_DEFAULT 100       /* a page of GET /queues/{q}/groups */
#define RD_ACK_BATCH_MAX 100              /* items of POST /queues/{q}/succeed */
#define RD_SETTLE_BATCH_MAX 100           /* settlements of a claim with settle */
#define RD_ENQUEUE_BATCH_MAX 1000         /* items of a batch enqueue (docs/reference.md
                                             "Batch enqueue") */
#define RD_ENQUEUE_MANY_MAX 100           /* items of one enqueue_many call (lua/10_enqueue.lua) */
#define RD_ENQUEUE_MANY_BYTES 1048576     /* bytes of payloads and attributes of one
                                             enqueue_many call of 2 items or more (1 MiB) */
#define RD_REPLAY_IDS_MAX 1000            /* ids of one batch replay request */
#define RD_TEXT_FILTER_MAX 1000           /* bytes of a batch replay's error_contains */
#define RD_LIST_FILTER_MAX 255            /* bytes of a listing's error_contains */
#define RD_KILL_REASON_MAX 1000           /* bytes of a kill's reason */
#define RD_LAST_ERROR_MAX 65536           /* bytes of a failure's error kept as last_error
                                             (longer: cut before a UTF-8 sequence; the
                                             library cuts the same way) */
#define RD_STATS_TOP_DEFAULT 10           /* top errors of GET /queues/{q}/stats */
#define RD_STATS_TOP_MAX 100

#endif
