/* problem.h - RFC 9457 problem details: the one table of every HTTP error
 * retryd returns (the API's and the HTTP server's own), and the one renderer
 * of their problem+json documents. Pure: no I/O. http.c sends them
 * (rd_http_respond_problem). */
#ifndef RETRYD_PROBLEM_H
#define RETRYD_PROBLEM_H

#include <stddef.h>

typedef enum rd_problem {
    RD_PROBLEM_MALFORMED_REQUEST,   /* 400 body is not a JSON object */
    RD_PROBLEM_UNAUTHORIZED,        /* 401 bearer token missing or wrong */
    RD_PROBLEM_FORBIDDEN,           /* 403 the token lacks the role or the queue */
    RD_PROBLEM_NOT_FOUND,           /* 404 unknown path or message */
    RD_PROBLEM_METHOD_NOT_ALLOWED,  /* 405 known path, other method */
    RD_PROBLEM_INVALID_STATE,       /* 409 transition from the wrong state */
    RD_PROBLEM_LEASE_MISMATCH,      /* 409 lease_token is not the current lease */
    RD_PROBLEM_PAYLOAD_TOO_LARGE,   /* 413 body over --max-body */
    RD_PROBLEM_EXPECTATION_FAILED,  /* 417 an Expect other than 100-continue */
    RD_PROBLEM_HEADERS_TOO_LARGE,   /* 431 request line and headers over the limit */
    RD_PROBLEM_VALIDATION_FAILED,   /* 422 with errors[] */
    RD_PROBLEM_INTERNAL,            /* 500 a reply we did not expect */
    RD_PROBLEM_NOT_IMPLEMENTED,     /* 501 a transfer coding other than chunked */
    RD_PROBLEM_BACKEND_UNAVAILABLE, /* 503 Redis not connected; nothing was done */
    RD_PROBLEM_OUTCOME_UNKNOWN,     /* 503 Redis went away after the command was sent */
    RD_PROBLEM_COUNT
} rd_problem_t;

#define RD_MAX_FIELD_ERRORS 8

typedef struct rd_field_error {
    const char *field;    /* static strings: names, codes and messages are literals */
    const char *code;     /* "required" | "invalid" */
    const char *message;
} rd_field_error_t;

typedef struct rd_field_errors {
    rd_field_error_t items[RD_MAX_FIELD_ERRORS];
    size_t count;
} rd_field_errors_t;

void rd_field_errors_add(rd_field_errors_t *errs, const char *field, const char *code,
                         const char *message);

int rd_problem_status(rd_problem_t p);
const char *rd_problem_slug(rd_problem_t p);
const char *rd_problem_title(rd_problem_t p);

/* The longest instance a problem echoes, in bytes: a longer one (a path of
 * up to 16 KiB) is cut to its first RD_PROBLEM_INSTANCE_MAX bytes, at a
 * UTF-8 character boundary. */
#define RD_PROBLEM_INSTANCE_MAX 256

/* The problem+json document; the caller frees it with rd_free. detail and
 * errs may be NULL; instance is cut as said above. */
char *rd_problem_body(rd_problem_t p, const char *detail, const char *instance,
                      size_t instance_len, const rd_field_errors_t *errs, size_t *len);

#endif
