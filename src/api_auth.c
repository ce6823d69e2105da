/* api_auth.c - who may use which route of the API: the bearer token's check
 * (401), its role and queue patterns (403 forbidden), the same rules on a
 * request's head before its body is read, and GET /auth/whoami
 * (docs/security.md "Tokens"). */
#include "retryd/api.h"
#include "retryd/api_call.h"

#include <string.h>

#include "retryd/jsonw.h"
#include "retryd/tokens.h"

static const char no_token_detail[] = "This server needs 'Authorization: Bearer <token>'.";
static const char wrong_token_detail[] = "The bearer token is wrong.";
static const char auth_challenge[] = "WWW-Authenticate: Bearer realm=\"retryd\"\r\n";

/* The token of the header in set, or NULL; *known false when the set does not
 * hold it (a 401). With no set the API is open: every request may do all. */
static const rd_token_t *token_of(const rd_tokens_t *set, const char *authorization, bool *known)
{
    const rd_token_t *t = rd_tokens_find(set, authorization);
    *known = set == NULL || t != NULL;
    return t;
}

static bool token_has_role(const rd_token_t *t, unsigned need)
{
    return t == NULL || rd_roles_grant(rd_token_roles(t), need);
}

static bool token_sees(const rd_token_t *t, const char *name, size_t len)
{
    return t == NULL || rd_token_allows_queue(t, name, len);
}

/* The 403 details, each naming the role the route needs, by role bit
 * position (static: a head check's refusal must be). */
#define LACKS_ROLE(r) "This token lacks the " r " role, which this route needs."
#define OUTSIDE_PATTERNS(r, what) \
    "This token's queue patterns do not cover " what "; this route needs the " r " role on it."
#define PER_ROLE(M, ...) \
    { M("producer", ##__VA_ARGS__), M("worker", ##__VA_ARGS__), M("reader", ##__VA_ARGS__), \
      M("operator", ##__VA_ARGS__), M("admin", ##__VA_ARGS__) }
static const char *const lacks_role[] = PER_ROLE(LACKS_ROLE);
static const char *const outside_queue[] = PER_ROLE(OUTSIDE_PATTERNS, "this queue");
static const char *const outside_to[] = PER_ROLE(OUTSIDE_PATTERNS, "the queue in to");
static const char *const outside_dlq[] = PER_ROLE(OUTSIDE_PATTERNS, "the dead_letter_queue");

/* need's position in the tables above (a route's role is one bit, never ANY
 * when it is refused). */
static size_t role_slot(unsigned need)
{
    size_t slot = 0;
    while (slot < 4 && (1u << slot) != need) slot++;
    return slot;
}

bool rd_api_authenticate(rd_call_t *c, bool public_route)
{
    bool known;
    c->tokens = rd_tokens_ref(c->api->tokens);
    c->token = token_of(c->tokens, c->req->authorization, &known);
    if (known || public_route) return true;
    /* Before any routing answer, so that without a token not even the shape
     * of the API shows; the public rows (/healthz, /openapi.json and the
     * console's files, none of which holds data) need none. */
    rd_api_respond_problem(c, RD_PROBLEM_UNAUTHORIZED,
                           c->req->authorization ? wrong_token_detail : no_token_detail, NULL,
                           auth_challenge);
    return false;
}

bool rd_api_authorize(rd_call_t *c)
{
    unsigned need = c->match.route->role;
    if (!token_has_role(c->token, need)) {
        rd_api_respond_problem(c, RD_PROBLEM_FORBIDDEN, lacks_role[role_slot(need)], NULL, NULL);
        return false;
    }
    if (c->match.queue && !token_sees(c->token, c->match.queue, c->match.queue_len)) {
        rd_api_respond_problem(c, RD_PROBLEM_FORBIDDEN, outside_queue[role_slot(need)], NULL,
                               NULL);
        return false;
    }
    return true;
}

bool rd_api_authorize_queue(rd_call_t *c, const char *name, size_t len, const char *field)
{
    if (token_sees(c->token, name, len)) return true;
    size_t slot = role_slot(c->match.route->role);
    const char *detail = strcmp(field, "to") == 0 ? outside_to[slot] : outside_dlq[slot];
    rd_api_respond_problem(c, RD_PROBLEM_FORBIDDEN, detail, NULL, NULL);
    return false;
}

bool rd_api_sees_queue(const rd_call_t *c, const char *name, size_t len)
{
    return token_sees(c->token, name, len);
}

bool rd_api_limited(const rd_call_t *c)
{
    return c->token != NULL && !rd_token_all_queues(c->token);
}

/* The token's checks on a request's head (rd_api_check_head, src/api.c):
 * without a known token every body is refused, public route or not (else
 * GETs of /healthz with bodies could fill --max-pending-body-bytes); with
 * one, the route's role and queue are checked as the handler would
 * (rd_api_authorize). m: the route matched, NULL when none did (404 or 405
 * once read, as without tokens). */
bool rd_api_head_allowed(const rd_api_t *api, const rd_http_request_t *head,
                         const rd_route_match_t *m, rd_http_refusal_t *refusal)
{
    bool known;
    const rd_token_t *t = token_of(api->tokens, head->authorization, &known);
    if (!known) {
        refusal->problem = RD_PROBLEM_UNAUTHORIZED;
        refusal->detail = head->authorization ? wrong_token_detail : no_token_detail;
        refusal->extra_headers = auth_challenge;
        return false;
    }
    if (m == NULL) return true;
    unsigned need = m->route->role;
    refusal->detail = NULL;
    if (!token_has_role(t, need))
        refusal->detail = lacks_role[role_slot(need)];
    else if (m->queue && m->queue_decoded && !token_sees(t, m->queue, m->queue_len))
        refusal->detail = outside_queue[role_slot(need)];
    if (refusal->detail == NULL) return true;
    refusal->problem = RD_PROBLEM_FORBIDDEN;
    refusal->extra_headers = NULL;
    return false;
}

void rd_api_set_tokens(rd_api_t *api, rd_tokens_t *tokens)
{
    rd_tokens_t *old = api->tokens;
    api->tokens = tokens;
    rd_tokens_unref(old);
}

void rd_api_handle_whoami(rd_call_t *c)
{
    unsigned have = c->token ? rd_token_roles(c->token) : RD_ROLE_ADMIN;
    rd_jsonw_t w;
    rd_api_begin_json(c, &w);
    rd_jsonw_object_open(&w);
    rd_jsonw_key(&w, "auth");
    rd_jsonw_bool(&w, c->tokens != NULL);
    rd_jsonw_key(&w, "roles");
    rd_jsonw_array_open(&w);
    for (unsigned bit = RD_ROLE_PRODUCER; bit <= RD_ROLE_ADMIN; bit <<= 1)
        if (have & bit) rd_jsonw_string(&w, rd_role_name(bit));
    rd_jsonw_array_close(&w);
    rd_jsonw_key(&w, "queue_patterns");
    rd_jsonw_array_open(&w);
    for (size_t i = 0; c->token && i < rd_token_pattern_count(c->token); i++)
        rd_jsonw_string(&w, rd_token_pattern(c->token, i));
    rd_jsonw_array_close(&w);
    rd_jsonw_object_close(&w);
    rd_api_respond_written(c, 200, NULL);
}
