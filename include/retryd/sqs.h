/* sqs.h - the SQS-compatible endpoint (docs/sqs.md): --sqs-listen serves
 * Amazon SQS's API over the same store operations as the HTTP API, so the
 * AWS CLI, the AWS SDKs and the frameworks on them drive retryd unchanged. */
#ifndef RETRYD_SQS_H
#define RETRYD_SQS_H

#include <stddef.h>
#include <uv.h>

#include "retryd/buf.h"
#include "retryd/coalesce.h"
#include "retryd/enqueue_lines.h"
#include "retryd/moves.h"
#include "retryd/store.h"
#include "retryd/waiters.h"

typedef struct rd_sqs rd_sqs_t;

typedef struct rd_sqs_options {
    const char *host;           /* --sqs-listen */
    int port;                   /* 0 picks a free one (rd_sqs_port) */
    const char *account;        /* --sqs-account, 12 digits */
    const char *region;         /* --sqs-region */
    const char *credentials;    /* --sqs-credentials path, NULL or "": no signature check */
    long long default_lease_ms; /* --lease-seconds: a queue without lease_seconds */
    size_t max_connections;     /* as the HTTP API's */
    uint64_t idle_timeout_ms;
    size_t max_pending_body_bytes;   /* as the HTTP API's, a budget of this listener's own */
    size_t max_pending_output_bytes;
    rd_store_t *store;          /* borrowed, as the HTTP API's */
    rd_coalescer_t *coalescer;  /* borrowed: receives and deletes go through it */
    rd_enqueue_lines_t *enqueues; /* borrowed: SendMessage goes through it */
    rd_waiters_t *waiters;      /* borrowed: long polls */
    rd_moves_t *moves;          /* borrowed: StartMessageMoveTask runs its tasks there */
} rd_sqs_options_t;

/* Loads the credentials, checks the listener (without credentials it must
 * be a loopback address) and starts listening. NULL with why[] on failure
 * (nothing to close then). */
rd_sqs_t *rd_sqs_start(uv_loop_t *loop, const rd_sqs_options_t *opts, char *why, size_t why_len);
int rd_sqs_port(const rd_sqs_t *sqs);
/* Stops accepting and lets answers in flight finish; on_drained runs once,
 * then sqs is freed. */
void rd_sqs_stop(rd_sqs_t *sqs, void (*on_drained)(void *arg), void *arg);
/* The store is going away (shutdown past its deadline): answers in flight
 * no longer reach it. */
void rd_sqs_forget_store(rd_sqs_t *sqs);
/* Prometheus samples: requests per action, errors per code. */
void rd_sqs_render_metrics(const rd_sqs_t *sqs, rd_buf_t *out);

#endif
