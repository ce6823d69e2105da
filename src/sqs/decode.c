/* sqs/decode.c - a request of either SQS wire protocol into one
 * rd_sqs_call_t (docs/sqs.md "One engine, a second face").
 *
 * JSON protocol: X-Amz-Target "AmazonSQS.<Action>", the body a JSON object
 * parsed strictly (json.c's rules), taken as the parameters as it is.
 * Query protocol: the form of the query string and of a form-encoded body,
 * its flattened names (Attribute.1.Name, SendMessageBatchRequestEntry.2.Id,
 * ...) turned into the JSON protocol's members by the table below, which
 * follows the locationName / flattened traits of botocore's SQS model (the
 * names boto3 1.26 and awscli 2.9 send).
 *
 * NUL: cJSON strings end at NUL, so a value holding one cannot be kept
 * whole. Rather than cut it short, decoding refuses it: in a MessageBody
 * with InvalidMessageContents (the body rule SQS applies to U+0000), in any
 * other value with InvalidParameterValue, in a query parameter's name with
 * MalformedQueryString. Every other byte, invalid UTF-8 included, is kept
 * for the action to check. */
#include "retryd/sqs/codec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/hex.h"
#include "retryd/json.h"

enum {
    /* No SQS request needs more (a batch of 10 entries of 10 attributes is
     * about 400); the bound keeps the name lookups below cheap. */
    MAX_QUERY_PARAMS = 2000,
    MAX_INDEX_DIGITS = 9,     /* N of a flattened name: 1 .. 999999999 */
};

static const char TARGET_PREFIX[] = "AmazonSQS.";

/* ---------------------------------------------------------------------------
 * Shared helpers
 * ------------------------------------------------------------------------- */

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* True when the media type of the Content-Type ct (parameters and case
 * ignored) is want. */
static bool media_type_is(const char *ct, const char *want)
{
    if (ct == NULL) return false;
    while (*ct == ' ' || *ct == '\t') ct++;
    size_t n = strlen(want);
    for (size_t i = 0; i < n; i++)
        if (lower(ct[i]) != want[i]) return false;
    const char *rest = ct + n;
    while (*rest == ' ' || *rest == '\t') rest++;
    return *rest == '\0' || *rest == ';';
}

/* An action name as SQS spells them: 1-63 letters and digits. */
static bool set_action(rd_sqs_call_t *out, const char *s, size_t len)
{
    if (len == 0 || len >= sizeof out->action) return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
    }
    memcpy(out->action, s, len);
    out->action[len] = '\0';
    return true;
}

/* obj[name] = a string value, replacing a member of that name. */
static void put_string(cJSON *obj, const char *name, const char *value)
{
    cJSON *old = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (old) cJSON_DeleteItemFromObjectCaseSensitive(obj, name);
    cJSON_AddStringToObject(obj, name, value);
}

static void put_item(cJSON *obj, const char *name, cJSON *item)
{
    cJSON_DeleteItemFromObjectCaseSensitive(obj, name);
    cJSON_AddItemToObject(obj, name, item);
}

static cJSON *child_object(cJSON *obj, const char *name)
{
    cJSON *c = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (c == NULL) {
        c = cJSON_CreateObject();
        cJSON_AddItemToObject(obj, name, c);
    }
    return c;
}

/* ---------------------------------------------------------------------------
 * JSON protocol
 * ------------------------------------------------------------------------- */

/* The member nearest to the first string (or name) that differs between doc
 * and marked, the same text parsed with U+0000 read as U+0001: that is where
 * the NUL was. *key gets its name ("" at the top). */
static bool find_nul(const cJSON *a, const cJSON *b, const char *parent_key, const char **key)
{
    for (; a && b; a = a->next, b = b->next) {
        const char *here = b->string ? b->string : parent_key;
        if (a->string && b->string && strlen(a->string) != strlen(b->string)) {
            *key = parent_key;
            return true;
        }
        if (cJSON_IsString(a) && strlen(a->valuestring) != strlen(b->valuestring)) {
            *key = here;
            return true;
        }
        if ((cJSON_IsObject(a) || cJSON_IsArray(a)) && find_nul(a->child, b->child, here, key))
            return true;
    }
    return false;
}

static const rd_sqs_error_t *nul_in_json(const char *body, size_t len, char *why, size_t why_len)
{
    rd_json_t *marked = rd_json_parse_nul_marked(body, len);
    const char *key = "";
    rd_json_t *plain = rd_json_parse(body, len, NULL);
    if (plain && marked) find_nul(rd_json_cjson(plain), rd_json_cjson(marked), "", &key);
    bool body_member = strcmp(key, "MessageBody") == 0;
    /* key is the client's text: quote it only when it is plain. */
    bool printable = key[0] != '\0' && strlen(key) <= 64;
    for (const char *p = key; printable && *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7F) printable = false;
    snprintf(why, why_len, "The value of %s%s%s contains U+0000, which is not allowed",
             printable ? "'" : "a parameter", printable ? key : "", printable ? "'" : "");
    rd_json_free(plain);
    rd_json_free(marked);
    return body_member ? &RD_SQS_ERR_INVALID_MESSAGE_CONTENTS : &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
}

static const rd_sqs_error_t *decode_json(const rd_sqs_wire_t *w, rd_sqs_call_t *out, char *why,
                                         size_t why_len)
{
    if (w->target == NULL) {
        snprintf(why, why_len, "The request must name its action in the X-Amz-Target header");
        return &RD_SQS_ERR_MISSING_PARAMETER;
    }
    size_t plen = sizeof TARGET_PREFIX - 1;
    size_t tlen = strlen(w->target);
    if (tlen < plen || memcmp(w->target, TARGET_PREFIX, plen) != 0 ||
        !set_action(out, w->target + plen, tlen - plen)) {
        snprintf(why, why_len, "The X-Amz-Target header is not AmazonSQS.<Action>");
        return &RD_SQS_ERR_INVALID_ACTION;
    }
    const char *body = w->body ? w->body : "";
    size_t len = w->body ? w->body_len : 0;
    size_t blank = 0;
    while (blank < len && (body[blank] == ' ' || body[blank] == '\t' || body[blank] == '\r' ||
                           body[blank] == '\n'))
        blank++;
    if (blank == len) {  /* no input at all: an action without parameters */
        out->params = cJSON_CreateObject();
        return NULL;
    }
    bool has_nul = false;
    rd_json_t *doc = rd_json_parse(body, len, &has_nul);
    if (doc == NULL) {
        snprintf(why, why_len, "The request body is not valid JSON");
        return &RD_SQS_ERR_SERIALIZATION;
    }
    if (!rd_json_is_object(doc)) {
        rd_json_free(doc);
        snprintf(why, why_len, "The request body is not a JSON object");
        return &RD_SQS_ERR_SERIALIZATION;
    }
    if (has_nul) {
        rd_json_free(doc);
        return nul_in_json(body, len, why, why_len);
    }
    out->params = rd_json_cjson(doc);
    return rd_sqs_check_shapes(out->params, why, why_len);
}

/* ---------------------------------------------------------------------------
 * Query protocol: the form
 * ------------------------------------------------------------------------- */

typedef struct param {
    char *name;
    char *value;
} param_t;

typedef struct params {
    param_t *items;
    size_t count, cap;
} params_t;

static void params_free(params_t *p)
{
    for (size_t i = 0; i < p->count; i++) {
        rd_free(p->items[i].name);
        rd_free(p->items[i].value);
    }
    rd_free(p->items);
    *p = (params_t){ 0 };
}

/* Percent- and '+'-decodes s[0..len) into a new string of *out_len bytes
 * (NUL bytes kept); NULL when a '%' is not followed by two hex digits. */
static char *form_decode(const char *s, size_t len, size_t *out_len)
{
    char *d = rd_malloc(len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '+') {
            d[n++] = ' ';
            continue;
        }
        if (s[i] != '%') {
            d[n++] = s[i];
            continue;
        }
        int hi = i + 1 < len ? rd_hex_digit(s[i + 1]) : -1;
        int lo = i + 2 < len ? rd_hex_digit(s[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
            rd_free(d);
            return NULL;
        }
        d[n++] = (char)(hi << 4 | lo);
        i += 2;
    }
    d[n] = '\0';
    *out_len = n;
    return d;
}

/* A quotable prefix of the client's text s for why[]: printable ASCII only. */
static void quote(char *dst, size_t cap, const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n + 1 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[n++] = c >= 0x20 && c < 0x7F ? (char)c : '?';
    }
    dst[n] = '\0';
}

/* True when the parameter name is a MessageBody, at the top or in an entry. */
static bool is_body_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return strcmp(dot ? dot + 1 : name, "MessageBody") == 0;
}

/* Splits form[0..len) at '&' and appends its parameters to p. */
static const rd_sqs_error_t *parse_form(const char *form, size_t len, params_t *p, char *why,
                                        size_t why_len)
{
    size_t i = 0;
    while (i < len) {
        const char *amp = memchr(form + i, '&', len - i);
        size_t end = amp ? (size_t)(amp - form) : len;
        const char *piece = form + i;
        size_t piece_len = end - i;
        i = end + 1;
        if (piece_len == 0) continue;
        const char *eq = memchr(piece, '=', piece_len);
        size_t name_raw = eq ? (size_t)(eq - piece) : piece_len;
        if (name_raw == 0) continue;  /* "=value": no name to give it */
        char q[48];
        size_t name_len, value_len;
        char *name = form_decode(piece, name_raw, &name_len);
        char *value = eq ? form_decode(eq + 1, piece_len - name_raw - 1, &value_len)
                         : (value_len = 0, rd_strdup(""));
        if (name == NULL || value == NULL) {
            quote(q, sizeof q, piece, name_raw);
            snprintf(why, why_len, "The parameter '%s' is not percent-encoded properly", q);
            rd_free(name);
            rd_free(value);
            return &RD_SQS_ERR_MALFORMED_QUERY;
        }
        const rd_sqs_error_t *err = NULL;
        if (memchr(name, '\0', name_len)) {
            snprintf(why, why_len, "A parameter name contains U+0000");
            err = &RD_SQS_ERR_MALFORMED_QUERY;
        } else if (memchr(value, '\0', value_len)) {
            quote(q, sizeof q, name, name_len);
            snprintf(why, why_len, "The value of '%s' contains U+0000, which is not allowed", q);
            err = is_body_name(name) ? &RD_SQS_ERR_INVALID_MESSAGE_CONTENTS
                                     : &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
        } else if (p->count == MAX_QUERY_PARAMS) {
            snprintf(why, why_len, "The request has more than %d parameters", MAX_QUERY_PARAMS);
            err = &RD_SQS_ERR_MALFORMED_QUERY;
        }
        if (err) {
            rd_free(name);
            rd_free(value);
            return err;
        }
        if (p->count == p->cap) {
            p->cap = p->cap ? 2 * p->cap : 16;
            p->items = rd_realloc(p->items, p->cap * sizeof p->items[0]);
        }
        p->items[p->count++] = (param_t){ name, value };
    }
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Query protocol: flattened names into the JSON protocol's members
 * ------------------------------------------------------------------------- */

typedef enum flat_kind {
    FLAT_LIST,      /* Prefix.N = v                       -> [v, ...] in N order */
    FLAT_NAME_VALUE,/* Prefix.N.Name = k, Prefix.N.Value = v -> {k: v} */
    FLAT_KEY_VALUE, /* Prefix.N.Key = k, Prefix.N.Value = v  -> {k: v} */
    FLAT_ATTRIBUTE, /* Prefix.N.Name = k, Prefix.N.Value.DataType/.StringValue/.BinaryValue
                       (/.StringListValue.M/.BinaryListValue.M) -> {k: {DataType: ...}} */
    FLAT_ENTRIES,   /* Prefix.N.<member> = v              -> [{member: v, ...}, ...] */
} flat_kind_t;

typedef struct flat_row {
    const char *prefix;     /* the query protocol's name (the model's locationName) */
    flat_kind_t kind;
    const char *member;     /* the JSON protocol's member */
    bool in_entries;        /* also inside a batch entry */
} flat_row_t;

static const flat_row_t FLAT_ROWS[] = {
    { "Attribute", FLAT_NAME_VALUE, "Attributes", false },
    { "AttributeName", FLAT_LIST, "AttributeNames", false },
    { "MessageAttributeName", FLAT_LIST, "MessageAttributeNames", false },
    { "MessageSystemAttributeName", FLAT_LIST, "MessageSystemAttributeNames", false },
    { "MessageAttribute", FLAT_ATTRIBUTE, "MessageAttributes", true },
    { "MessageSystemAttribute", FLAT_ATTRIBUTE, "MessageSystemAttributes", true },
    /* CreateQueue's member is "tags", TagQueue's "Tags" (member_for). */
    { "Tag", FLAT_KEY_VALUE, "Tags", false },
    { "TagKey", FLAT_LIST, "TagKeys", false },
    { "SendMessageBatchRequestEntry", FLAT_ENTRIES, "Entries", false },
    { "DeleteMessageBatchRequestEntry", FLAT_ENTRIES, "Entries", false },
    { "ChangeMessageVisibilityBatchRequestEntry", FLAT_ENTRIES, "Entries", false },
    /* AddPermission (retryd answers UnsupportedOperation, but decodes it). */
    { "AWSAccountId", FLAT_LIST, "AWSAccountIds", false },
    { "ActionName", FLAT_LIST, "Actions", false },
};

static const char *member_for(const flat_row_t *row, const char *action)
{
    if (row->kind == FLAT_KEY_VALUE && strcmp(action, "CreateQueue") == 0) return "tags";
    return row->member;
}

static const flat_row_t *flat_row(const char *head, size_t len, bool in_entry)
{
    for (size_t i = 0; i < sizeof FLAT_ROWS / sizeof FLAT_ROWS[0]; i++) {
        const flat_row_t *r = &FLAT_ROWS[i];
        if (strlen(r->prefix) == len && memcmp(r->prefix, head, len) == 0 && (!in_entry || r->in_entries))
            return r;
    }
    return NULL;
}

/* The N of a flattened name at s[0..len): 1-9 digits, no leading zero. */
static bool index_ok(const char *s, size_t len)
{
    if (len == 0 || len > MAX_INDEX_DIGITS || s[0] == '0') return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

/* Orders "N" keys numerically (they have no leading zeros). */
static int by_index(const void *a, const void *b)
{
    const char *x = (*(const cJSON *const *)a)->string, *y = (*(const cJSON *const *)b)->string;
    size_t lx = strlen(x), ly = strlen(y);
    return lx != ly ? (lx < ly ? -1 : 1) : strcmp(x, y);
}

/* The children of obj in index order: an array the caller frees. */
static cJSON **sorted_children(cJSON *obj, size_t *n)
{
    *n = (size_t)cJSON_GetArraySize(obj);
    cJSON **v = rd_malloc((*n ? *n : 1) * sizeof *v);
    size_t k = 0;
    for (cJSON *c = obj->child; c; c = c->next) v[k++] = c;
    qsort(v, *n, sizeof *v, by_index);
    return v;
}

typedef struct scope_ctx {
    const char *action;
    char *why;
    size_t why_len;
} scope_ctx_t;

static cJSON *build_scope(const char *const *names, const char *const *values, size_t n,
                          bool in_entry, const scope_ctx_t *ctx, const rd_sqs_error_t **err);

static const char *str_of(cJSON *group, const char *rest)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(group, rest);
    return v ? v->valuestring : NULL;
}

/* Sub-members of group not in the shape go back to params under their full
 * name ("Attribute.1.Other"), as unknown names do. */
static const char *const ATTRIBUTE_LISTS[] = { "Value.StringListValue.", "Value.BinaryListValue.",
                                                NULL };

static void keep_unknown(cJSON *params, const flat_row_t *row, const char *index, cJSON *group,
                         const char *const *known, size_t known_n, const char *const *list_prefixes)
{
    for (cJSON *m = group->child; m; m = m->next) {
        bool is_known = false;
        for (size_t i = 0; i < known_n && !is_known; i++) is_known = strcmp(m->string, known[i]) == 0;
        for (size_t i = 0; list_prefixes && list_prefixes[i] && !is_known; i++)
            is_known = strncmp(m->string, list_prefixes[i], strlen(list_prefixes[i])) == 0;
        if (is_known) continue;
        rd_buf_t full = RD_BUF_INIT;
        rd_buf_printf(&full, "%s.%s%s%s", row->prefix, index, m->string[0] ? "." : "", m->string);
        put_string(params, full.data, m->valuestring);
        rd_buf_free(&full);
    }
}

/* group's "<prefix>M" members (M an index) as a list in M order; NULL when
 * there are none. Members with a bad M stay unknown. */
static cJSON *sub_list(cJSON *group, const char *prefix)
{
    cJSON *tmp = cJSON_CreateObject();
    size_t plen = strlen(prefix);
    for (cJSON *m = group->child; m; m = m->next) {
        const char *idx = m->string + plen;
        if (strncmp(m->string, prefix, plen) == 0 && index_ok(idx, strlen(idx)))
            cJSON_AddStringToObject(tmp, idx, m->valuestring);
    }
    cJSON *list = NULL;
    if (tmp->child) {
        size_t n;
        cJSON **v = sorted_children(tmp, &n);
        list = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(list, cJSON_CreateString(v[i]->valuestring));
        rd_free(v);
    }
    cJSON_Delete(tmp);
    return list;
}

static const rd_sqs_error_t *missing(const scope_ctx_t *ctx, const flat_row_t *row, const char *index,
                                     const char *what)
{
    snprintf(ctx->why, ctx->why_len, "The request must contain the parameter %s.%s.%s", row->prefix,
             index, what);
    return &RD_SQS_ERR_MISSING_PARAMETER;
}

/* Turns groups[row->prefix] ({N: {rest: value}}) into params[member]. */
static const rd_sqs_error_t *finish_row(cJSON *params, const flat_row_t *row, cJSON *by_n,
                                        const scope_ctx_t *ctx)
{
    size_t n;
    cJSON **groups = sorted_children(by_n, &n);
    const rd_sqs_error_t *err = NULL;
    cJSON *result = row->kind == FLAT_LIST || row->kind == FLAT_ENTRIES ? cJSON_CreateArray()
                                                                        : cJSON_CreateObject();
    bool any = false;
    for (size_t i = 0; i < n && err == NULL; i++) {
        cJSON *g = groups[i];
        const char *index = g->string;
        switch (row->kind) {
        case FLAT_LIST: {
            static const char *const known[] = { "" };
            const char *v = str_of(g, "");
            if (v) {
                cJSON_AddItemToArray(result, cJSON_CreateString(v));
                any = true;
            }
            keep_unknown(params, row, index, g, known, 1, NULL);
            break;
        }
        case FLAT_NAME_VALUE:
        case FLAT_KEY_VALUE: {
            const char *key_name = row->kind == FLAT_NAME_VALUE ? "Name" : "Key";
            const char *const known[] = { key_name, "Value" };
            const char *k = str_of(g, key_name), *v = str_of(g, "Value");
            if (k == NULL && v != NULL) err = missing(ctx, row, index, key_name);
            else if (k != NULL && v == NULL) err = missing(ctx, row, index, "Value");
            else if (k != NULL) {
                put_string(result, k, v);
                any = true;
            }
            keep_unknown(params, row, index, g, known, 2, NULL);
            break;
        }
        case FLAT_ATTRIBUTE: {
            static const char *const known[] = { "Name", "Value.DataType", "Value.StringValue",
                                                 "Value.BinaryValue" };
            const char *k = str_of(g, "Name");
            cJSON *value = cJSON_CreateObject();
            for (size_t f = 1; f < 4; f++) {
                const char *v = str_of(g, known[f]);
                if (v) cJSON_AddStringToObject(value, known[f] + strlen("Value."), v);
            }
            cJSON *sl = sub_list(g, ATTRIBUTE_LISTS[0]);
            if (sl) cJSON_AddItemToObject(value, "StringListValues", sl);
            cJSON *bl = sub_list(g, ATTRIBUTE_LISTS[1]);
            if (bl) cJSON_AddItemToObject(value, "BinaryListValues", bl);
            if (k == NULL && value->child) {
                err = missing(ctx, row, index, "Name");
                cJSON_Delete(value);
            } else if (k != NULL) {
                put_item(result, k, value);
                any = true;
            } else {
                cJSON_Delete(value);
            }
            keep_unknown(params, row, index, g, known, 4, ATTRIBUTE_LISTS);
            break;
        }
        case FLAT_ENTRIES: {
            size_t m = (size_t)cJSON_GetArraySize(g), k = 0;
            const char **names = rd_malloc((m ? m : 1) * sizeof *names);
            const char **values = rd_malloc((m ? m : 1) * sizeof *values);
            for (cJSON *c = g->child; c; c = c->next, k++) {
                names[k] = c->string;
                values[k] = c->valuestring;
            }
            cJSON *entry = build_scope(names, values, m, true, ctx, &err);
            rd_free(names);
            rd_free(values);
            if (entry) {
                cJSON_AddItemToArray(result, entry);
                any = true;
            }
            break;
        }
        }
    }
    rd_free(groups);
    if (err || !any) {
        cJSON_Delete(result);
        return err;
    }
    put_item(params, member_for(row, ctx->action), result);
    return NULL;
}

/* The parameters names[i] = values[i] as one JSON-shaped object: flattened
 * names of FLAT_ROWS collected by prefix and index, then finished in index
 * order; every other name as a string member. Later duplicates win. */
static cJSON *build_scope(const char *const *names, const char *const *values, size_t n,
                          bool in_entry, const scope_ctx_t *ctx, const rd_sqs_error_t **err)
{
    cJSON *params = cJSON_CreateObject();
    cJSON *groups = cJSON_CreateObject();  /* prefix -> N -> rest -> value */
    *err = NULL;
    for (size_t i = 0; i < n && *err == NULL; i++) {
        const char *name = names[i];
        const char *dot = strchr(name, '.');
        const flat_row_t *row = dot ? flat_row(name, (size_t)(dot - name), in_entry) : NULL;
        if (row == NULL) {
            put_string(params, name, values[i]);
            continue;
        }
        const char *index = dot + 1;
        const char *dot2 = strchr(index, '.');
        size_t index_len = dot2 ? (size_t)(dot2 - index) : strlen(index);
        if (!index_ok(index, index_len)) {
            char q[48];
            quote(q, sizeof q, name, strlen(name));
            snprintf(ctx->why, ctx->why_len,
                     "The parameter '%s' must have a positive index (1-999999999) after %s.", q,
                     row->prefix);
            *err = &RD_SQS_ERR_MALFORMED_QUERY;
            break;
        }
        char idx[MAX_INDEX_DIGITS + 1];
        memcpy(idx, index, index_len);
        idx[index_len] = '\0';
        cJSON *group = child_object(child_object(groups, row->prefix), idx);
        put_string(group, dot2 ? dot2 + 1 : "", values[i]);
    }
    for (cJSON *g = groups->child; g && *err == NULL; g = g->next)
        *err = finish_row(params, flat_row(g->string, strlen(g->string), in_entry), g, ctx);
    cJSON_Delete(groups);
    if (*err) {
        cJSON_Delete(params);
        return NULL;
    }
    return params;
}

/* Names the query protocol's envelope and SigV4's presigned query use, not
 * the action's parameters. */
static bool envelope_name(const char *name)
{
    return strcmp(name, "Action") == 0 || strcmp(name, "Version") == 0 ||
           strncmp(name, "X-Amz-", 6) == 0;
}

static const rd_sqs_error_t *decode_query(const rd_sqs_wire_t *w, rd_sqs_call_t *out, char *why,
                                          size_t why_len)
{
    params_t p = { 0 };
    const rd_sqs_error_t *err = NULL;
    if (w->query && w->query_len) err = parse_form(w->query, w->query_len, &p, why, why_len);
    bool form_body = w->content_type == NULL ||
                     media_type_is(w->content_type, "application/x-www-form-urlencoded");
    if (err == NULL && form_body && w->body && w->body_len)
        err = parse_form(w->body, w->body_len, &p, why, why_len);
    if (err) {
        params_free(&p);
        return err;
    }
    const char *action = NULL;
    const char **names = rd_malloc((p.count ? p.count : 1) * sizeof *names);
    const char **values = rd_malloc((p.count ? p.count : 1) * sizeof *values);
    size_t n = 0;
    for (size_t i = 0; i < p.count; i++) {
        if (strcmp(p.items[i].name, "Action") == 0) action = p.items[i].value;
        if (envelope_name(p.items[i].name)) continue;
        names[n] = p.items[i].name;
        values[n++] = p.items[i].value;
    }
    if (action == NULL || action[0] == '\0') {
        snprintf(why, why_len, "The request must contain the parameter Action.");
        err = &RD_SQS_ERR_MISSING_PARAMETER;
    } else if (!set_action(out, action, strlen(action))) {
        char q[48];
        quote(q, sizeof q, action, strlen(action));
        snprintf(why, why_len, "The action %s is not valid for this endpoint.", q);
        err = &RD_SQS_ERR_INVALID_ACTION;
    } else {
        scope_ctx_t ctx = { out->action, why, why_len };
        out->params = build_scope(names, values, n, false, &ctx, &err);
    }
    rd_free(names);
    rd_free(values);
    params_free(&p);
    return err;
}

/* ---------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------- */

rd_sqs_protocol_t rd_sqs_wire_protocol(const rd_sqs_wire_t *w)
{
    bool json = w->target != NULL || media_type_is(w->content_type, "application/x-amz-json-1.0");
    return json ? RD_SQS_JSON : RD_SQS_QUERY;
}

const rd_sqs_error_t *rd_sqs_decode(const rd_sqs_wire_t *w, rd_sqs_call_t *out, char *why,
                                    size_t why_len)
{
    memset(out, 0, sizeof *out);
    if (why_len) why[0] = '\0';
    out->protocol = rd_sqs_wire_protocol(w);
    bool json = out->protocol == RD_SQS_JSON;
    const rd_sqs_error_t *err = json ? decode_json(w, out, why, why_len)
                                     : decode_query(w, out, why, why_len);
    if (err) {
        cJSON_Delete(out->params);
        out->params = NULL;
    }
    return err;
}

void rd_sqs_call_clear(rd_sqs_call_t *c)
{
    cJSON_Delete(c->params);
    c->params = NULL;
}

const char *rd_sqs_str(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
