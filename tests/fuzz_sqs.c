/* fuzz_sqs.c - libFuzzer harness over the SQS wire protocols: raw bytes are
 * decoded as a request of either protocol (src/sqs/decode.c), and whatever
 * decodes is answered through both encoders (src/sqs/encode.c) and its
 * MessageAttributes through the packer (src/sqs/attributes.c), as the
 * endpoint would. Every answer must parse back (JSON strictly, XML with
 * libxml2) and every packed blob must unpack to what was packed: anything
 * else aborts the run.
 *
 * Input: one flags byte, then a head up to the first '\n', then the body.
 *   bit 0: the head is the X-Amz-Target (JSON protocol), else the query string
 *   bits 1-2: Content-Type: none, form, x-amz-json-1.0, text/plain */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/json.h"
#include "retryd/sqs/attributes.h"
#include "retryd/sqs/codec.h"
#include "retryd/utf8.h"

static void check_json(const rd_buf_t *b)
{
    rd_json_t *doc = rd_json_parse(b->data, b->len, NULL);
    if (doc == NULL) {
        fprintf(stderr, "invalid JSON answer: %.*s\n", (int)b->len, b->data);
        abort();
    }
    rd_json_free(doc);
}

static void check_xml(const rd_buf_t *b)
{
    xmlDocPtr doc = xmlReadMemory(b->data, (int)b->len, "a.xml", NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    if (doc == NULL) {
        fprintf(stderr, "malformed XML answer: %.*s\n", (int)b->len, b->data);
        abort();
    }
    xmlFreeDoc(doc);
}

static void answer(const rd_sqs_call_t *call, const rd_sqs_error_t *err, const char *why)
{
    for (int p = 0; p < 2; p++) {
        rd_sqs_protocol_t proto = p ? RD_SQS_JSON : RD_SQS_QUERY;
        rd_buf_t out = RD_BUF_INIT, headers = RD_BUF_INIT;
        const char *ct = NULL;
        if (err) rd_sqs_encode_error(&out, &headers, proto, err, why, "fuzz-request", &ct);
        else rd_sqs_encode_result(&out, proto, call->action, call->params, why, &ct);
        if (ct == NULL) abort();
        if (proto == RD_SQS_JSON) check_json(&out);
        else check_xml(&out);
        rd_buf_free(&out);
        rd_buf_free(&headers);
    }
}

/* Packs each MessageAttributes map found (top level and in Entries) and
 * checks that the blob unpacks to the same attributes and digests alike
 * when selected whole. */
static void pack_attributes(const cJSON *obj)
{
    const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(obj, "MessageAttributes");
    rd_buf_t blob = RD_BUF_INIT, again = RD_BUF_INIT;
    size_t size;
    char why[256];
    if (attrs && rd_sqs_attributes_pack(attrs, &blob, &size, why, sizeof why) == 0) {
        cJSON *back = rd_sqs_attributes_unpack(blob.data ? blob.data : "", blob.len, NULL, NULL);
        if (back == NULL || rd_sqs_attributes_select(blob.data ? blob.data : "", blob.len, NULL, NULL,
                                                     &again) != 0 || again.len != blob.len)
            abort();
        /* What went in, less empty list members the packer ignores. */
        rd_buf_t repacked = RD_BUF_INIT;
        if (rd_sqs_attributes_pack(back, &repacked, &size, why, sizeof why) != 0 ||
            repacked.len != blob.len || (blob.len && memcmp(repacked.data, blob.data, blob.len) != 0))
            abort();
        rd_buf_free(&repacked);
        cJSON_Delete(back);
    }
    rd_buf_free(&blob);
    rd_buf_free(&again);
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(obj, "Entries");
    if (cJSON_IsArray(entries))
        for (const cJSON *e = entries->child; e; e = e->next)
            if (cJSON_IsObject(e)) pack_attributes(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        rd_alloc_init();
        xmlInitParser();
        ready = true;
    }
    if (size == 0) return 0;
    static const char *const types[] = { NULL, "application/x-www-form-urlencoded",
                                         "application/x-amz-json-1.0", "text/plain" };
    uint8_t flags = data[0];
    const char *rest = (const char *)data + 1;
    size_t rest_len = size - 1;
    const char *nl = memchr(rest, '\n', rest_len);
    size_t head_len = nl ? (size_t)(nl - rest) : 0;
    const char *body = nl ? nl + 1 : rest;
    size_t body_len = nl ? rest_len - head_len - 1 : rest_len;
    char *head = rd_strndup(rest, head_len);  /* a header value is a C string */
    rd_sqs_wire_t w = { .content_type = types[(flags >> 1) & 3], .body = body, .body_len = body_len };
    if (flags & 1) {
        w.target = head;
    } else {
        w.query = head;
        w.query_len = head_len;
    }
    rd_sqs_call_t call;
    char why[256];
    const rd_sqs_error_t *err = rd_sqs_decode(&w, &call, why, sizeof why);
    if (err == NULL && (call.params == NULL || !cJSON_IsObject(call.params))) abort();
    if (err != NULL && call.params != NULL) abort();
    answer(&call, err, why);
    if (err == NULL) pack_attributes(call.params);
    rd_sqs_call_clear(&call);
    rd_free(head);
    /* The body as a stored trailer that no pack made (redis-cli, another
     * release): unpacking and selecting it must not crash; and as a stored
     * payload, each protocol's text of it is valid UTF-8 without U+0000. */
    cJSON *any = rd_sqs_attributes_unpack(body, body_len, NULL, NULL);
    cJSON_Delete(any);
    rd_buf_t sel = RD_BUF_INIT;
    rd_sqs_attributes_select(body, body_len, NULL, NULL, &sel);
    rd_buf_free(&sel);
    for (int p = 0; p < 2; p++) {
        rd_buf_t text = RD_BUF_INIT;
        rd_sqs_wire_text(p ? RD_SQS_QUERY : RD_SQS_JSON, body, body_len, &text);
        if (!rd_utf8_valid(text.data, text.len) || memchr(text.data, '\0', text.len)) abort();
        rd_buf_free(&text);
    }
    return 0;
}
