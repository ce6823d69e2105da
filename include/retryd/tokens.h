/* tokens.h - the bearer tokens of --token-file and --auth-token-file, each
 * with its roles and queue patterns (docs/security.md "Tokens").
 *
 * Only SHA-256 digests of the tokens are kept; a presented token is hashed
 * and compared with every stored digest in constant time, so neither its
 * length nor how much of it matched shows in the time taken. No function
 * here writes a token into a message or a log. */
#ifndef RETRYD_TOKENS_H
#define RETRYD_TOKENS_H

#include <stdbool.h>
#include <stddef.h>

/* What a token may do, as a bit set. A route needs one role (or none: any
 * known token); rd_roles_grant says whether a set covers it. */
typedef enum rd_role {
    RD_ROLE_ANY = 0,                 /* a route any known token may use */
    RD_ROLE_PRODUCER = 1u << 0,      /* enqueue */
    RD_ROLE_WORKER = 1u << 1,        /* claim and settle */
    RD_ROLE_READER = 1u << 2,        /* read messages, stats, policies, metrics */
    RD_ROLE_OPERATOR = 1u << 3,      /* replay, kill, delete, policy writes, ... and reader */
    RD_ROLE_ADMIN = 1u << 4,         /* everything */
} rd_role_t;

/* True when a token with roles `have` may use a route that needs `need`:
 * need is RD_ROLE_ANY, have holds it or admin, or need is reader and have
 * holds operator. */
bool rd_roles_grant(unsigned have, unsigned need);

/* "producer", ... for one role bit; "any" for RD_ROLE_ANY. */
const char *rd_role_name(unsigned role);

/* Parses a comma list of role names (s[0..len)) into *mask. Returns false on
 * an empty list, an empty item or an unknown name. */
bool rd_roles_parse(const char *s, size_t len, unsigned *mask);

typedef struct rd_token rd_token_t;
typedef struct rd_tokens rd_tokens_t;

/* Reads path: one token per line, "TOKEN ROLES [queue-pattern ...]"
 * separated by blanks; ROLES a comma list (rd_roles_parse); patterns fnmatch
 * globs on queue names, none = every queue; blank lines and lines starting
 * with '#' skipped. A token is 1-4096 visible ASCII bytes, a pattern 1-255,
 * a line at most 8192 bytes; a token may appear once. Returns NULL with why[]
 * naming the line number and what is wrong (never a field of the line), also
 * for a file with no token. The set starts with one reference. */
rd_tokens_t *rd_tokens_load(const char *path, char *why, size_t why_len);

/* An empty set with one reference. */
rd_tokens_t *rd_tokens_new(void);

/* Adds token[0..len) with roles and no patterns (--auth-token-file's, as
 * admin). It comes before every token already in the set: a token listed
 * twice has the roles of the first. */
void rd_tokens_add_first(rd_tokens_t *set, const char *token, size_t len, unsigned roles);

size_t rd_tokens_count(const rd_tokens_t *set);

/* References: the API holds one, and each request one while it runs, so a
 * set replaced on SIGHUP lives until its last request has answered. NULL is
 * accepted and ignored. */
rd_tokens_t *rd_tokens_ref(rd_tokens_t *set);
void rd_tokens_unref(rd_tokens_t *set);

/* The token of an Authorization header "Bearer <token>" (scheme
 * case-insensitive), or NULL when the header is NULL, another scheme, or a
 * token the set does not hold. Valid while the set is referenced. */
const rd_token_t *rd_tokens_find(const rd_tokens_t *set, const char *authorization);

unsigned rd_token_roles(const rd_token_t *t);
size_t rd_token_pattern_count(const rd_token_t *t);
const char *rd_token_pattern(const rd_token_t *t, size_t i);

/* True when t may use queue name[0..len): t has no patterns, or one of them
 * matches the whole name. */
bool rd_token_allows_queue(const rd_token_t *t, const char *name, size_t len);

/* True when t sees every queue (it has no patterns). */
bool rd_token_all_queues(const rd_token_t *t);

#endif
