/* sqs/encode.c - SQS answers in the client's protocol (docs/sqs.md "One
 * engine, a second face", "Errors").
 *
 * A result comes in the JSON protocol's output shape. The JSON protocol
 * prints it as it is; the query protocol writes it as the XML botocore's
 * query parser reads: <ActionResponse><ActionResult>...</ActionResult>
 * <ResponseMetadata><RequestId/></ResponseMetadata></ActionResponse>, with
 * the maps and lists of SQS's model flattened under their locationName
 * (MEMBERS below). Both writers emit well-formed text whatever the strings
 * hold: bytes that are not UTF-8, and characters XML 1.0 cannot carry (C0
 * controls but tab, LF and CR; U+FFFE, U+FFFF), become U+FFFD. The actions
 * check message bodies (rd_sqs_body_chars_ok) so that this never changes
 * what a client sent through SQS. */
#include "retryd/sqs/codec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <libxml/xmlwriter.h>

#include "retryd/alloc.h"
#include "retryd/utf8.h"

static const char JSON_TYPE[] = "application/x-amz-json-1.0";
static const char XML_TYPE[] = "text/xml";
static const char XMLNS[] = "http://queue.amazonaws.com/doc/2012-11-05/";
static const char TYPE_PREFIX[] = "com.amazonaws.sqs#";

/* ---------------------------------------------------------------------------
 * Text that each format can carry
 * ------------------------------------------------------------------------- */

static bool xml_char(unsigned cp)
{
    return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
           (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
}

/* s[0..len) as valid UTF-8 without U+0000 into out; with for_xml,
 * characters outside XML 1.0's Char too become U+FFFD. Returns whether
 * anything was replaced. */
static bool clean_text_n(const char *s, size_t len, rd_buf_t *out, bool for_xml)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    bool replaced = false;
    rd_buf_reserve(out, len + 1);
    while (i < len) {
        unsigned cp;
        size_t n = rd_utf8_sequence(u + i, len - i, &cp);
        if (n > 0 && cp != 0 && (!for_xml || xml_char(cp))) {
            i += n;
            continue;
        }
        rd_buf_append(out, s + run, i - run);
        rd_buf_append(out, "\xEF\xBF\xBD", 3);
        i += n ? n : 1;
        run = i;
        replaced = true;
    }
    rd_buf_append(out, s + run, len - run);
    return replaced;
}

static bool clean_text(const char *s, rd_buf_t *out, bool for_xml)
{
    return clean_text_n(s, strlen(s), out, for_xml);
}

bool rd_sqs_wire_text(rd_sqs_protocol_t p, const char *s, size_t len, rd_buf_t *out)
{
    bool replaced = clean_text_n(s, len, out, p == RD_SQS_QUERY);
    rd_buf_append(out, "", 1);
    out->len--;
    return replaced;
}

/* True when every string (and member name) below j is valid UTF-8. */
static bool utf8_tree(const cJSON *j)
{
    for (; j; j = j->next) {
        if (j->string && !rd_utf8_valid(j->string, strlen(j->string))) return false;
        if (cJSON_IsString(j) && !rd_utf8_valid(j->valuestring, strlen(j->valuestring))) return false;
        if (!utf8_tree(j->child)) return false;
    }
    return true;
}

/* Replaces what is not UTF-8 in every string of the (copied) tree j. */
static void repair_tree(cJSON *j)
{
    for (; j; j = j->next) {
        rd_buf_t b = RD_BUF_INIT;
        if (j->string && clean_text(j->string, &b, false)) {
            cJSON_free(j->string);
            j->string = cJSON_malloc(b.len + 1);
            memcpy(j->string, b.data, b.len + 1);
        }
        rd_buf_reset(&b);
        if (cJSON_IsString(j) && clean_text(j->valuestring, &b, false)) cJSON_SetValuestring(j, b.data);
        rd_buf_free(&b);
        repair_tree(j->child);
    }
}

static void append_json(rd_buf_t *out, const cJSON *j)
{
    cJSON *copy = NULL;
    if (!utf8_tree(j)) {
        copy = cJSON_Duplicate(j, true);
        repair_tree(copy);
        j = copy;
    }
    char *text = cJSON_PrintUnformatted(j);
    rd_buf_puts(out, text);
    cJSON_free(text);
    cJSON_Delete(copy);
}

/* ---------------------------------------------------------------------------
 * XML
 * ------------------------------------------------------------------------- */

typedef struct xml {
    xmlBufferPtr buf;
    xmlTextWriterPtr w;
    const char *action;
    rd_buf_t scratch;
} xml_t;

#define X(s) ((const xmlChar *)(s))

static void xml_open(xml_t *x, const char *action)
{
    x->buf = xmlBufferCreate();
    x->w = xmlNewTextWriterMemory(x->buf, 0);
    if (x->buf == NULL || x->w == NULL) abort();
    x->action = action;
    x->scratch = (rd_buf_t)RD_BUF_INIT;
    xmlTextWriterStartDocument(x->w, NULL, NULL, NULL);
}

static void xml_close(xml_t *x, rd_buf_t *out)
{
    xmlTextWriterEndDocument(x->w);
    xmlFreeTextWriter(x->w);  /* flushes into buf */
    rd_buf_append(out, xmlBufferContent(x->buf), (size_t)xmlBufferLength(x->buf));
    xmlBufferFree(x->buf);
    rd_buf_free(&x->scratch);
}

/* An element name: the model's names are XML names already; any other
 * byte (a name the result should not have) becomes '_', so the element
 * is still well-formed. */
static void start(xml_t *x, const char *name)
{
    rd_buf_reset(&x->scratch);
    for (const char *p = name; *p; p++) {
        char c = *p;
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
                  (p > name && ((c >= '0' && c <= '9') || c == '-' || c == '.'));
        rd_buf_putc(&x->scratch, ok ? c : '_');
    }
    if (x->scratch.len == 0) rd_buf_putc(&x->scratch, '_');
    xmlTextWriterStartElement(x->w, X(x->scratch.data));
}

static void end(xml_t *x)
{
    xmlTextWriterEndElement(x->w);
}

static void text(xml_t *x, const char *s)
{
    rd_buf_reset(&x->scratch);
    clean_text(s, &x->scratch, true);
    xmlTextWriterWriteString(x->w, X(x->scratch.data));
}

static void element(xml_t *x, const char *name, const char *value)
{
    start(x, name);
    text(x, value);
    end(x);
}

/* A member's element names in the query protocol, from SQS's model: maps
 * and lists are flattened, each entry under the element named here. */
typedef enum member_kind { MEMBER_MAP, MEMBER_LIST } member_kind_t;

typedef struct member_row {
    const char *member;         /* the JSON protocol's member name */
    const char *action;         /* NULL: in every action */
    member_kind_t kind;
    const char *entry;          /* the flattened element of each entry */
    const char *key, *value;    /* a map entry's key and value elements */
} member_row_t;

static const member_row_t MEMBERS[] = {
    { "Attributes", NULL, MEMBER_MAP, "Attribute", "Name", "Value" },
    { "MessageAttributes", NULL, MEMBER_MAP, "MessageAttribute", "Name", "Value" },
    { "MessageSystemAttributes", NULL, MEMBER_MAP, "MessageSystemAttribute", "Name", "Value" },
    { "Tags", NULL, MEMBER_MAP, "Tag", "Key", "Value" },
    { "tags", NULL, MEMBER_MAP, "Tag", "Key", "Value" },
    { "Messages", NULL, MEMBER_LIST, "Message", NULL, NULL },
    { "QueueUrls", NULL, MEMBER_LIST, "QueueUrl", NULL, NULL },
    { "queueUrls", NULL, MEMBER_LIST, "QueueUrl", NULL, NULL },
    { "Successful", "SendMessageBatch", MEMBER_LIST, "SendMessageBatchResultEntry", NULL, NULL },
    { "Successful", "DeleteMessageBatch", MEMBER_LIST, "DeleteMessageBatchResultEntry", NULL, NULL },
    { "Successful", "ChangeMessageVisibilityBatch", MEMBER_LIST,
      "ChangeMessageVisibilityBatchResultEntry", NULL, NULL },
    { "Failed", NULL, MEMBER_LIST, "BatchResultErrorEntry", NULL, NULL },
    { "Results", NULL, MEMBER_LIST, "ListMessageMoveTasksResultEntry", NULL, NULL },
    { "StringListValues", NULL, MEMBER_LIST, "StringListValue", NULL, NULL },
    { "BinaryListValues", NULL, MEMBER_LIST, "BinaryListValue", NULL, NULL },
};

static const member_row_t *member_row(const char *member, const char *action)
{
    for (size_t i = 0; i < sizeof MEMBERS / sizeof MEMBERS[0]; i++) {
        const member_row_t *r = &MEMBERS[i];
        if (strcmp(r->member, member) == 0 && (r->action == NULL || strcmp(r->action, action) == 0))
            return r;
    }
    return NULL;
}

static void write_members(xml_t *x, const cJSON *obj);

/* The content of one value: text for scalars, child elements for a
 * structure. */
static void write_value(xml_t *x, const cJSON *v)
{
    char num[64];
    if (cJSON_IsString(v)) {
        text(x, v->valuestring);
    } else if (cJSON_IsBool(v)) {
        text(x, cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18) snprintf(num, sizeof num, "%lld", (long long)d);
        else snprintf(num, sizeof num, "%.17g", d);
        text(x, num);
    } else if (cJSON_IsObject(v)) {
        write_members(x, v);
    }
}

/* One member: a flattened map or list per MEMBERS, else an element named
 * after it (a list without a row repeats that element). */
static void write_member(xml_t *x, const char *name, const cJSON *v)
{
    if (cJSON_IsNull(v)) return;
    const member_row_t *row = member_row(name, x->action);
    if (row && row->kind == MEMBER_MAP && cJSON_IsObject(v)) {
        for (const cJSON *e = v->child; e; e = e->next) {
            start(x, row->entry);
            element(x, row->key, e->string);
            start(x, row->value);
            write_value(x, e);
            end(x);
            end(x);
        }
        return;
    }
    if (cJSON_IsArray(v)) {
        const char *entry = row ? row->entry : name;
        for (const cJSON *e = v->child; e; e = e->next) {
            start(x, entry);
            write_value(x, e);
            end(x);
        }
        return;
    }
    start(x, name);
    write_value(x, v);
    end(x);
}

static void write_members(xml_t *x, const cJSON *obj)
{
    for (const cJSON *m = obj->child; m; m = m->next) write_member(x, m->string, m);
}

/* Actions whose output is empty in SQS's model: their answer has no
 * <ActionResult> (botocore's parser looks for one only when there is an
 * output, and then requires it). */
static bool empty_output(const char *action)
{
    static const char *const names[] = { "AddPermission", "ChangeMessageVisibility", "DeleteMessage",
                                         "DeleteQueue", "PurgeQueue", "RemovePermission",
                                         "SetQueueAttributes", "TagQueue", "UntagQueue" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i], action) == 0) return true;
    return false;
}

static void xml_result(rd_buf_t *out, const char *action, const cJSON *result, const char *request_id)
{
    xml_t x;
    xml_open(&x, action);
    rd_buf_t name = RD_BUF_INIT;
    rd_buf_printf(&name, "%sResponse", action);
    start(&x, name.data);
    xmlTextWriterWriteAttribute(x.w, X("xmlns"), X(XMLNS));
    bool has_members = cJSON_IsObject(result) && result->child;
    if (!empty_output(action) || has_members) {
        rd_buf_reset(&name);
        rd_buf_printf(&name, "%sResult", action);
        start(&x, name.data);
        if (cJSON_IsObject(result)) write_members(&x, result);
        end(&x);
    }
    start(&x, "ResponseMetadata");
    element(&x, "RequestId", request_id ? request_id : "");
    end(&x);
    end(&x);
    rd_buf_free(&name);
    xml_close(&x, out);
}

/* ---------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------- */

void rd_sqs_encode_result(rd_buf_t *out, rd_sqs_protocol_t p, const char *action,
                          const cJSON *result, const char *request_id, const char **content_type)
{
    if (p == RD_SQS_JSON) {
        *content_type = JSON_TYPE;
        if (result == NULL) rd_buf_puts(out, "{}");
        else append_json(out, result);
        return;
    }
    *content_type = XML_TYPE;
    xml_result(out, action && action[0] ? action : "Unknown", result, request_id);
}

void rd_sqs_encode_error(rd_buf_t *out, rd_buf_t *headers, rd_sqs_protocol_t p,
                         const rd_sqs_error_t *e, const char *message, const char *request_id,
                         const char **content_type)
{
    const char *fault = e->sender ? "Sender" : "Receiver";
    if (p == RD_SQS_JSON) {
        *content_type = JSON_TYPE;
        cJSON *body = cJSON_CreateObject();
        rd_buf_t type = RD_BUF_INIT;
        rd_buf_printf(&type, "%s%s", TYPE_PREFIX, e->code);
        cJSON_AddStringToObject(body, "__type", type.data);
        if (message) cJSON_AddStringToObject(body, "message", message);
        append_json(out, body);
        cJSON_Delete(body);
        rd_buf_free(&type);
        rd_buf_printf(headers, "x-amzn-query-error: %s;%s\r\n", e->query_code, fault);
        return;
    }
    *content_type = XML_TYPE;
    xml_t x;
    xml_open(&x, "");
    start(&x, "ErrorResponse");
    xmlTextWriterWriteAttribute(x.w, X("xmlns"), X(XMLNS));
    start(&x, "Error");
    element(&x, "Type", fault);
    element(&x, "Code", e->query_code);
    if (message) element(&x, "Message", message);
    start(&x, "Detail");
    end(&x);
    end(&x);
    element(&x, "RequestId", request_id ? request_id : "");
    end(&x);
    xml_close(&x, out);
}
