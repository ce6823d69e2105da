/* test_sqs_codec.c - unit tests for the SQS wire protocols (src/sqs/decode.c,
 * encode.c, attributes.c, errors.c): requests as botocore serializes them
 * (tests/fixtures/sqs/query.tsv, made by tests/sqs_vectors.py), JSON bodies,
 * malformed input, XML answers read back by libxml2 and by botocore's own
 * query parser (tests/sqs_parse_xml.py), and MD5OfMessageAttributes against
 * digests hashlib computed (tests/fixtures/sqs/md5.tsv). Run from the source
 * tree; no network. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/json.h"
#include "retryd/sqs/attributes.h"
#include "retryd/sqs/codec.h"
#include "retryd/utf8.h"

static const char FORM[] = "application/x-www-form-urlencoded; charset=utf-8";
static const char AMZ_JSON[] = "application/x-amz-json-1.0";

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

static cJSON *parse_json(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    if (j == NULL) fail_msg("test JSON does not parse: %s", text);
    return j;
}

static void assert_json_equal(const cJSON *got, const cJSON *want)
{
    if (!cJSON_Compare(got, want, true)) {
        char *g = got ? cJSON_PrintUnformatted(got) : NULL, *w = cJSON_PrintUnformatted(want);
        print_error("got  %s\nwant %s\n", g ? g : "(null)", w);
        cJSON_free(g);
        cJSON_free(w);
        fail();
    }
}

static const rd_sqs_error_t *decode_form(const char *body, size_t len, rd_sqs_call_t *call, char *why)
{
    rd_sqs_wire_t w = { .content_type = FORM, .body = body, .body_len = len };
    return rd_sqs_decode(&w, call, why, 256);
}

static const rd_sqs_error_t *decode_json(const char *target, const char *body, size_t len,
                                         rd_sqs_call_t *call, char *why)
{
    rd_sqs_wire_t w = { .content_type = AMZ_JSON, .target = target, .body = body, .body_len = len };
    return rd_sqs_decode(&w, call, why, 256);
}

/* The form decodes to exactly want_json (a JSON text). */
static void assert_form(const char *form, const char *action, const char *want_json)
{
    rd_sqs_call_t call;
    char why[256];
    const rd_sqs_error_t *e = decode_form(form, strlen(form), &call, why);
    if (e) fail_msg("%s: %s (%s)", form, e->code, why);
    assert_int_equal(call.protocol, RD_SQS_QUERY);
    assert_string_equal(call.action, action);
    cJSON *want = parse_json(want_json);
    assert_json_equal(call.params, want);
    cJSON_Delete(want);
    rd_sqs_call_clear(&call);
}

static void assert_form_error(const char *form, size_t len, const rd_sqs_error_t *want)
{
    rd_sqs_call_t call;
    char why[256];
    const rd_sqs_error_t *e = decode_form(form, len, &call, why);
    if (e != want) fail_msg("%.*s: got %s, want %s", (int)len, form, e ? e->code : "success", want->code);
    assert_null(call.params);
    assert_true(why[0] != '\0');
    assert_true(rd_utf8_valid(why, strlen(why)));
}

static void assert_json_error(const char *target, const char *body, size_t len,
                              const rd_sqs_error_t *want)
{
    rd_sqs_call_t call;
    char why[256];
    const rd_sqs_error_t *e = decode_json(target, body, len, &call, why);
    if (e != want) fail_msg("%.*s: got %s, want %s", (int)len, body, e ? e->code : "success", want->code);
    assert_int_equal(call.protocol, RD_SQS_JSON);
    assert_null(call.params);
    assert_true(why[0] != '\0');
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    rd_buf_t b = RD_BUF_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) rd_buf_append(&b, chunk, n);
    fclose(f);
    if (b.data == NULL) rd_buf_puts(&b, "");
    return rd_buf_take(&b, len);
}

/* The lines of a committed vector file, '#' comments left out: a NULL-ended
 * array of strings in one allocation each; free with free_lines. */
static char **read_lines(const char *path)
{
    size_t len;
    char *text = read_file(path, &len);
    if (text == NULL) fail_msg("cannot read %s (run from the source tree)", path);
    size_t n = 0, cap = 16;
    char **lines = rd_malloc(cap * sizeof *lines);
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (l[0] == '#') continue;
        if (n + 2 > cap) lines = rd_realloc(lines, (cap *= 2) * sizeof *lines);
        lines[n++] = rd_strdup(l);
    }
    lines[n] = NULL;
    rd_free(text);
    return lines;
}

static void free_lines(char **lines)
{
    for (char **l = lines; *l; l++) rd_free(*l);
    rd_free(lines);
}

/* Splits line at its tabs into fields[0..max). */
static size_t split_tabs(char *line, char **fields, size_t max)
{
    size_t n = 0;
    fields[n++] = line;
    for (char *p = line; *p && n < max; p++)
        if (*p == '\t') {
            *p = '\0';
            fields[n++] = p + 1;
        }
    return n;
}

/* A well-formed XML document, as libxml2 reads it (NULL: not well-formed). */
static xmlDocPtr parse_xml(const rd_buf_t *b)
{
    return xmlReadMemory(b->data, (int)b->len, "answer.xml", NULL, XML_PARSE_NONET | XML_PARSE_NOWARNING);
}

static bool have_botocore(void)
{
    return system("/usr/bin/python3 -c 'import botocore.parsers' >/dev/null 2>&1") == 0;
}

/* What botocore's query parser reads from the answer (tests/sqs_parse_xml.py). */
static cJSON *botocore_parse(const char *action, int status, const rd_buf_t *answer)
{
    char path[] = "/tmp/test_sqs_codec_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, answer->data, answer->len), (ssize_t)answer->len);
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/sqs_parse_xml.py %s %d < %s", action, status, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    rd_buf_t out = RD_BUF_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, p)) > 0) rd_buf_append(&out, chunk, n);
    int rc = pclose(p);
    unlink(path);
    if (rc != 0 || out.data == NULL) fail_msg("botocore could not parse the %s answer:\n%.*s", action, (int)answer->len, answer->data);
    cJSON *j = parse_json(out.data);
    rd_buf_free(&out);
    return j;
}

/* ---------------------------------------------------------------------------
 * Decoding: the query protocol
 * ------------------------------------------------------------------------- */

/* Every request botocore serialized decodes to the parameters it was given. */
static void test_botocore_forms(void **state)
{
    char **lines = read_lines("tests/fixtures/sqs/query.tsv");
    size_t count = 0;
    for (char **l = lines; *l; l++, count++) {
        char *f[3];
        assert_int_equal(split_tabs(*l, f, 3), 3);
        assert_form(f[1], f[0], f[2]);
    }
    assert_true(count >= 20);
    free_lines(lines);
}

/* The same forms in the query string of a GET (no body) decode the same. */
static void test_botocore_forms_in_query_string(void **state)
{
    char **lines = read_lines("tests/fixtures/sqs/query.tsv");
    for (char **l = lines; *l; l++) {
        char *f[3];
        split_tabs(*l, f, 3);
        rd_sqs_wire_t w = { .query = f[1], .query_len = strlen(f[1]) };
        rd_sqs_call_t call;
        char why[256];
        assert_null(rd_sqs_decode(&w, &call, why, sizeof why));
        assert_string_equal(call.action, f[0]);
        cJSON *want = parse_json(f[2]);
        assert_json_equal(call.params, want);
        cJSON_Delete(want);
        rd_sqs_call_clear(&call);
    }
    free_lines(lines);
}

static void test_list_order_follows_n_with_gaps(void **state)
{
    assert_form("Action=ReceiveMessage&AttributeName.10=c&AttributeName.2=a&AttributeName.7=b"
                "&MessageAttributeName.3=y&MessageAttributeName.1=x",
                "ReceiveMessage",
                "{\"AttributeNames\":[\"a\",\"b\",\"c\"],\"MessageAttributeNames\":[\"x\",\"y\"]}");
    assert_form("Action=ReceiveMessage&MessageSystemAttributeName.2=SentTimestamp"
                "&MessageSystemAttributeName.1=All",
                "ReceiveMessage", "{\"MessageSystemAttributeNames\":[\"All\",\"SentTimestamp\"]}");
    /* Entries too, and a message attribute inside an entry. */
    assert_form("Action=DeleteMessageBatch&DeleteMessageBatchRequestEntry.11.Id=b"
                "&DeleteMessageBatchRequestEntry.11.ReceiptHandle=h2"
                "&DeleteMessageBatchRequestEntry.3.Id=a&DeleteMessageBatchRequestEntry.3.ReceiptHandle=h1",
                "DeleteMessageBatch",
                "{\"Entries\":[{\"Id\":\"a\",\"ReceiptHandle\":\"h1\"},{\"Id\":\"b\",\"ReceiptHandle\":\"h2\"}]}");
}

static void test_tags_member_per_action(void **state)
{
    assert_form("Action=CreateQueue&QueueName=q&Tag.1.Key=k&Tag.1.Value=v", "CreateQueue",
                "{\"QueueName\":\"q\",\"tags\":{\"k\":\"v\"}}");
    assert_form("Action=TagQueue&QueueUrl=u&Tag.1.Key=k&Tag.1.Value=v&Tag.2.Key=e&Tag.2.Value=",
                "TagQueue", "{\"QueueUrl\":\"u\",\"Tags\":{\"k\":\"v\",\"e\":\"\"}}");
    assert_form("Action=UntagQueue&QueueUrl=u&TagKey.2=b&TagKey.1=a", "UntagQueue",
                "{\"QueueUrl\":\"u\",\"TagKeys\":[\"a\",\"b\"]}");
}

static void test_message_attribute_lists_and_system_attributes(void **state)
{
    assert_form("Action=SendMessage&MessageBody=b&MessageAttribute.1.Name=l"
                "&MessageAttribute.1.Value.DataType=String"
                "&MessageAttribute.1.Value.StringListValue.2=y&MessageAttribute.1.Value.StringListValue.1=x"
                "&MessageSystemAttribute.1.Name=AWSTraceHeader"
                "&MessageSystemAttribute.1.Value.DataType=String"
                "&MessageSystemAttribute.1.Value.StringValue=Root%3D1",
                "SendMessage",
                "{\"MessageBody\":\"b\",\"MessageAttributes\":{\"l\":{\"DataType\":\"String\","
                "\"StringListValues\":[\"x\",\"y\"]}},\"MessageSystemAttributes\":{\"AWSTraceHeader\":"
                "{\"DataType\":\"String\",\"StringValue\":\"Root=1\"}}}");
}

/* Names outside the table, or outside a row's shape, stay plain strings. */
static void test_unknown_names_stay_plain(void **state)
{
    assert_form("Action=SendMessage&Foo.1.Bar=x&Attribute.1.Other=y&Attribute=z&Entries=w",
                "SendMessage",
                "{\"Foo.1.Bar\":\"x\",\"Attribute.1.Other\":\"y\",\"Attribute\":\"z\",\"Entries\":\"w\"}");
    /* AttributeName inside an entry is not a list there. */
    assert_form("Action=SendMessageBatch&SendMessageBatchRequestEntry.1.AttributeName.1=a",
                "SendMessageBatch", "{\"Entries\":[{\"AttributeName.1\":\"a\"}]}");
}

/* Action, Version and a presigned query's X-Amz-* are the envelope. */
static void test_envelope_taken_out(void **state)
{
    assert_form("Action=ListQueues&Version=2012-11-05&X-Amz-Algorithm=AWS4-HMAC-SHA256"
                "&X-Amz-Signature=abc&QueueNamePrefix=a+b%2Bc",
                "ListQueues", "{\"QueueNamePrefix\":\"a b+c\"}");
}

static void test_duplicates_last_wins(void **state)
{
    assert_form("Action=GetQueueUrl&QueueName=a&QueueName=b&Action=GetQueueUrl", "GetQueueUrl",
                "{\"QueueName\":\"b\"}");
    assert_form("Action=GetQueueAttributes&AttributeName.1=a&AttributeName.1=b", "GetQueueAttributes",
                "{\"AttributeNames\":[\"b\"]}");
    /* The later N wins a map key given twice. */
    assert_form("Action=SetQueueAttributes&Attribute.1.Name=k&Attribute.1.Value=1"
                "&Attribute.2.Name=k&Attribute.2.Value=2",
                "SetQueueAttributes", "{\"Attributes\":{\"k\":\"2\"}}");
}

/* A body of any other type is no form; an empty Content-Type is taken as one. */
static void test_form_body_content_types(void **state)
{
    const char form[] = "Action=ListQueues&QueueNamePrefix=p";
    rd_sqs_wire_t w = { .content_type = "text/plain", .body = form, .body_len = strlen(form) };
    rd_sqs_call_t call;
    char why[256];
    assert_ptr_equal(rd_sqs_decode(&w, &call, why, sizeof why), &RD_SQS_ERR_MISSING_PARAMETER);
    w.content_type = NULL;
    assert_null(rd_sqs_decode(&w, &call, why, sizeof why));
    assert_string_equal(call.action, "ListQueues");
    rd_sqs_call_clear(&call);
    w.content_type = "Application/X-WWW-Form-URLEncoded";
    assert_null(rd_sqs_decode(&w, &call, why, sizeof why));
    rd_sqs_call_clear(&call);
}

static void test_malformed_forms(void **state)
{
#define BAD(s, e) assert_form_error(s, sizeof(s) - 1, &(e))
    BAD("Action=ListQueues&QueueNamePrefix=%", RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=ListQueues&QueueNamePrefix=%4", RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=ListQueues&QueueNamePrefix=%zz", RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=ListQueues&Queue%G0=a", RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=GetQueueAttributes&AttributeName.0=a", RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=GetQueueAttributes&AttributeName.01=a", RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=GetQueueAttributes&AttributeName.x=a", RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=GetQueueAttributes&AttributeName.-1=a", RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=GetQueueAttributes&AttributeName.=a", RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=GetQueueAttributes&AttributeName.99999999999999999999=a", RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=SendMessageBatch&SendMessageBatchRequestEntry.1.MessageAttribute.1000000000.Name=a",
        RD_SQS_ERR_MALFORMED_QUERY);
    BAD("Action=SetQueueAttributes&Attribute.1.Value=v", RD_SQS_ERR_MISSING_PARAMETER);
    BAD("Action=SetQueueAttributes&Attribute.1.Name=n", RD_SQS_ERR_MISSING_PARAMETER);
    BAD("Action=TagQueue&Tag.1.Value=v", RD_SQS_ERR_MISSING_PARAMETER);
    BAD("Action=SendMessage&MessageAttribute.1.Value.StringValue=v", RD_SQS_ERR_MISSING_PARAMETER);
    BAD("QueueName=a", RD_SQS_ERR_MISSING_PARAMETER);
    BAD("Action=", RD_SQS_ERR_MISSING_PARAMETER);
    BAD("", RD_SQS_ERR_MISSING_PARAMETER);
    BAD("Action=Send%20Message", RD_SQS_ERR_INVALID_ACTION);
    BAD("Action=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        RD_SQS_ERR_INVALID_ACTION);
#undef BAD
    /* The largest N there is decodes. */
    assert_form("Action=GetQueueAttributes&AttributeName.999999999=a", "GetQueueAttributes",
                "{\"AttributeNames\":[\"a\"]}");
}

static void test_too_many_parameters(void **state)
{
    rd_buf_t form = RD_BUF_INIT;
    rd_buf_puts(&form, "Action=ListQueues");
    for (int i = 0; i < 1999; i++) rd_buf_printf(&form, "&p%d=", i);
    rd_sqs_call_t call;
    char why[256];
    assert_null(decode_form(form.data, form.len, &call, why));
    assert_int_equal(cJSON_GetArraySize(call.params), 1999);
    rd_sqs_call_clear(&call);
    rd_buf_puts(&form, "&one=more");
    assert_form_error(form.data, form.len, &RD_SQS_ERR_MALFORMED_QUERY);
    rd_buf_free(&form);
}

/* A NUL would cut a cJSON string short: refused, never truncated. */
static void test_nul_refused_in_query(void **state)
{
#define BAD(s, e) assert_form_error(s, sizeof(s) - 1, &(e))
    BAD("Action=SendMessage&MessageBody=a%00b", RD_SQS_ERR_INVALID_MESSAGE_CONTENTS);
    BAD("Action=SendMessageBatch&SendMessageBatchRequestEntry.1.MessageBody=%00",
        RD_SQS_ERR_INVALID_MESSAGE_CONTENTS);
    BAD("Action=SendMessage&QueueUrl=a%00b", RD_SQS_ERR_INVALID_PARAMETER_VALUE);
    BAD("Action=SendMessage&Queue%00Url=a", RD_SQS_ERR_MALFORMED_QUERY);
    /* A raw NUL byte in the body, too. */
    BAD("Action=SendMessage&MessageBody=a\0b", RD_SQS_ERR_INVALID_MESSAGE_CONTENTS);
#undef BAD
}

/* Bytes that are no UTF-8 are kept for the action to refuse. */
static void test_invalid_utf8_kept(void **state)
{
    const char form[] = "Action=SendMessage&MessageBody=%FF%C3%28\xfe";
    rd_sqs_call_t call;
    char why[256];
    assert_null(decode_form(form, sizeof form - 1, &call, why));
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(call.params, "MessageBody");
    assert_string_equal(body->valuestring, "\xff\xc3(\xfe");
    assert_false(rd_sqs_body_chars_ok(body->valuestring, strlen(body->valuestring)));
    rd_sqs_call_clear(&call);
}

/* ---------------------------------------------------------------------------
 * Decoding: the JSON protocol
 * ------------------------------------------------------------------------- */

static void test_json_bodies(void **state)
{
    const char body[] = "{\"QueueUrl\":\"u\",\"MaxNumberOfMessages\":10,\"WaitTimeSeconds\":20,"
                        "\"MessageAttributeNames\":[\"All\"],\"X\":true}";
    rd_sqs_call_t call;
    char why[256];
    assert_null(decode_json("AmazonSQS.ReceiveMessage", body, sizeof body - 1, &call, why));
    assert_int_equal(call.protocol, RD_SQS_JSON);
    assert_string_equal(call.action, "ReceiveMessage");
    cJSON *want = parse_json(body);
    assert_json_equal(call.params, want);
    cJSON_Delete(want);
    rd_sqs_call_clear(&call);
    /* No body (or only white space) is no parameters. */
    assert_null(decode_json("AmazonSQS.ListQueues", " \r\n", 3, &call, why));
    assert_int_equal(cJSON_GetArraySize(call.params), 0);
    rd_sqs_call_clear(&call);
    /* X-Amz-Target alone makes it the JSON protocol, whatever the type says. */
    rd_sqs_wire_t w = { .content_type = FORM, .target = "AmazonSQS.ListQueues", .body = "{}",
                        .body_len = 2 };
    assert_null(rd_sqs_decode(&w, &call, why, sizeof why));
    assert_int_equal(call.protocol, RD_SQS_JSON);
    rd_sqs_call_clear(&call);
    /* Unicode escapes, including a surrogate pair, come out as UTF-8. */
    const char esc[] = "{\"MessageBody\":\"\\u00e9\\ud83d\\ude00\"}";
    assert_null(decode_json("AmazonSQS.SendMessage", esc, sizeof esc - 1, &call, why));
    assert_string_equal(cJSON_GetObjectItem(call.params, "MessageBody")->valuestring,
                        "\xc3\xa9\xf0\x9f\x98\x80");
    rd_sqs_call_clear(&call);
}

static void test_json_malformed(void **state)
{
#define BAD(t, s, e) assert_json_error(t, s, sizeof(s) - 1, &(e))
    const char *t = "AmazonSQS.SendMessage";
    BAD(t, "{\"QueueUrl\":\"u\"", RD_SQS_ERR_SERIALIZATION);
    BAD(t, "{\"QueueUrl\":\"u\"}x", RD_SQS_ERR_SERIALIZATION);
    BAD(t, "{\"QueueUrl\":\"u\"}{}", RD_SQS_ERR_SERIALIZATION);
    BAD(t, "[1,2]", RD_SQS_ERR_SERIALIZATION);
    BAD(t, "\"s\"", RD_SQS_ERR_SERIALIZATION);
    BAD(t, "{\"MessageBody\":\"a\x01" "b\"}", RD_SQS_ERR_SERIALIZATION);
    BAD(t, "{\"MessageBody\":\"a\nb\"}", RD_SQS_ERR_SERIALIZATION);
    BAD(t, "{\"DelaySeconds\":01}", RD_SQS_ERR_SERIALIZATION);
    BAD(t, "{\"MessageBody\":\"a\0b\"}", RD_SQS_ERR_SERIALIZATION);
    BAD("AmazonSQS.", "{}", RD_SQS_ERR_INVALID_ACTION);
    BAD("AmazonSNS.Publish", "{}", RD_SQS_ERR_INVALID_ACTION);
    BAD("AmazonSQS.Send.Message", "{}", RD_SQS_ERR_INVALID_ACTION);
    BAD(NULL, "{}", RD_SQS_ERR_MISSING_PARAMETER);
#undef BAD
    /* The action is known even when the body is bad: the error names it. */
    rd_sqs_call_t call;
    char why[256];
    decode_json("AmazonSQS.SendMessage", "{", 1, &call, why);
    assert_string_equal(call.action, "SendMessage");
}

/* A member of the wrong type is refused at decoding, before any action reads
 * it: CreateQueue's Attributes as a list crashed retryd (a NULL member name
 * given to strcmp). */
static void test_json_shapes(void **state)
{
#define BAD(t, s) assert_json_error(t, s, sizeof(s) - 1, &RD_SQS_ERR_SERIALIZATION)
    BAD("AmazonSQS.CreateQueue", "{\"QueueName\":\"q\",\"Attributes\":[1]}");
    BAD("AmazonSQS.CreateQueue", "{\"QueueName\":\"q\",\"Attributes\":{\"DelaySeconds\":[]}}");
    BAD("AmazonSQS.CreateQueue", "{\"QueueName\":\"q\",\"tags\":[\"a\"]}");
    BAD("AmazonSQS.SetQueueAttributes", "{\"QueueUrl\":\"u\",\"Attributes\":\"x\"}");
    BAD("AmazonSQS.GetQueueAttributes", "{\"QueueUrl\":\"u\",\"AttributeNames\":\"All\"}");
    BAD("AmazonSQS.GetQueueAttributes", "{\"QueueUrl\":\"u\",\"AttributeNames\":[1]}");
    BAD("AmazonSQS.TagQueue", "{\"QueueUrl\":\"u\",\"Tags\":[[\"k\",\"v\"]]}");
    BAD("AmazonSQS.UntagQueue", "{\"QueueUrl\":\"u\",\"TagKeys\":{\"k\":\"v\"}}");
    BAD("AmazonSQS.SendMessage", "{\"QueueUrl\":[\"u\"],\"MessageBody\":\"b\"}");
    BAD("AmazonSQS.SendMessage", "{\"QueueUrl\":\"u\",\"MessageBody\":5}");
    BAD("AmazonSQS.SendMessage", "{\"QueueUrl\":\"u\",\"MessageBody\":\"b\",\"DelaySeconds\":{}}");
    BAD("AmazonSQS.SendMessage", "{\"QueueUrl\":\"u\",\"MessageBody\":\"b\",\"MessageAttributes\":[1]}");
    BAD("AmazonSQS.SendMessage", "{\"QueueUrl\":\"u\",\"MessageBody\":\"b\",\"MessageAttributes\":{\"a\":1}}");
    BAD("AmazonSQS.SendMessage", "{\"QueueUrl\":\"u\",\"MessageBody\":\"b\",\"MessageAttributes\":"
        "{\"a\":{\"DataType\":\"String\",\"StringValue\":7}}}");
    BAD("AmazonSQS.SendMessage", "{\"QueueUrl\":\"u\",\"MessageBody\":\"b\",\"MessageAttributes\":"
        "{\"a\":{\"DataType\":\"String\",\"StringListValues\":[1]}}}");
    BAD("AmazonSQS.SendMessageBatch", "{\"QueueUrl\":\"u\",\"Entries\":{\"a\":1}}");
    BAD("AmazonSQS.SendMessageBatch", "{\"QueueUrl\":\"u\",\"Entries\":[1]}");
    BAD("AmazonSQS.SendMessageBatch", "{\"QueueUrl\":\"u\",\"Entries\":[{\"Id\":\"a\",\"MessageBody\":[]}]}");
    BAD("AmazonSQS.DeleteMessageBatch", "{\"QueueUrl\":\"u\",\"Entries\":[{\"Id\":1,\"ReceiptHandle\":\"h\"}]}");
    BAD("AmazonSQS.ReceiveMessage", "{\"QueueUrl\":\"u\",\"MessageAttributeNames\":[null]}");
#undef BAD
    /* Integers as strings, nulls, empty lists and maps, and members retryd
     * does not know keep decoding: the actions judge their values. */
    static const char *const ok[] = {
        "{\"QueueUrl\":\"u\",\"MaxNumberOfMessages\":\"5\",\"WaitTimeSeconds\":null}",
        "{\"QueueName\":\"q\",\"Attributes\":{},\"tags\":{\"k\":\"v\"}}",
        "{\"QueueUrl\":\"u\",\"Entries\":[],\"AttributeNames\":[]}",
        "{\"QueueUrl\":\"u\",\"Unknown\":[{\"x\":1}]}",
        "{\"QueueUrl\":\"u\",\"Entries\":[{\"Id\":\"a\",\"MessageBody\":\"b\",\"DelaySeconds\":3,"
        "\"MessageAttributes\":{\"n\":{\"DataType\":\"Number\",\"StringValue\":\"1\"}}}]}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        rd_sqs_call_t call;
        char why[256];
        const rd_sqs_error_t *e = decode_json("AmazonSQS.SendMessageBatch", ok[i], strlen(ok[i]), &call, why);
        if (e) fail_msg("%s: %s (%s)", ok[i], e->code, why);
        rd_sqs_call_clear(&call);
    }
}

/* The body as each protocol carries it: what MD5OfBody digests. */
static void test_wire_text(void **state)
{
    (void)state;
    static const struct { const char *in; size_t len; const char *json, *xml; bool replaced_xml; } cases[] = {
        { "plain", 5, "plain", "plain", false },
        { "a\x01" "b", 3, "a\x01" "b", "a\xEF\xBF\xBD" "b", true },
        { "tab\tlf\ncr\r", 10, "tab\tlf\ncr\r", "tab\tlf\ncr\r", false },
        { "\xEF\xBF\xBF", 3, "\xEF\xBF\xBF", "\xEF\xBF\xBD", true },          /* U+FFFF */
        { "\xC2\x85", 2, "\xC2\x85", "\xC2\x85", false },                       /* U+0085 */
        { "x\xFFy", 3, "x\xEF\xBF\xBDy", "x\xEF\xBF\xBDy", true },              /* not UTF-8 */
        { "n\0ul", 4, "n\xEF\xBF\xBDul", "n\xEF\xBF\xBDul", true },             /* U+0000 */
        { "\xF0\x9F\x98\x80", 4, "\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80", false },
        { "", 0, "", "", false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rd_buf_t j = RD_BUF_INIT, x = RD_BUF_INIT;
        rd_sqs_wire_text(RD_SQS_JSON, cases[i].in, cases[i].len, &j);
        bool rx = rd_sqs_wire_text(RD_SQS_QUERY, cases[i].in, cases[i].len, &x);
        assert_string_equal(j.data, cases[i].json);
        assert_int_equal(j.len, strlen(cases[i].json));
        assert_string_equal(x.data, cases[i].xml);
        assert_int_equal(rx, cases[i].replaced_xml);
        rd_buf_free(&j);
        rd_buf_free(&x);
    }
}

static void test_nul_refused_in_json(void **state)
{
#define BAD(s, e) assert_json_error("AmazonSQS.SendMessageBatch", s, sizeof(s) - 1, &(e))
    BAD("{\"MessageBody\":\"a\\u0000b\"}", RD_SQS_ERR_INVALID_MESSAGE_CONTENTS);
    BAD("{\"Entries\":[{\"Id\":\"1\",\"MessageBody\":\"\\u0000\"}]}", RD_SQS_ERR_INVALID_MESSAGE_CONTENTS);
    BAD("{\"QueueUrl\":\"\\u0000\"}", RD_SQS_ERR_INVALID_PARAMETER_VALUE);
    BAD("{\"a\\u0000b\":\"x\"}", RD_SQS_ERR_INVALID_PARAMETER_VALUE);
#undef BAD
    /* "\\u0000" is an escaped backslash and text, no NUL. */
    rd_sqs_call_t call;
    char why[256];
    const char ok[] = "{\"MessageBody\":\"\\\\u0000\"}";
    assert_null(decode_json("AmazonSQS.SendMessage", ok, sizeof ok - 1, &call, why));
    assert_string_equal(cJSON_GetObjectItem(call.params, "MessageBody")->valuestring, "\\u0000");
    rd_sqs_call_clear(&call);
}

/* Invalid UTF-8 and lone surrogates reach the action as bytes it refuses. */
static void test_json_invalid_utf8_kept(void **state)
{
    const char body[] = "{\"MessageBody\":\"\xff\",\"B\":\"\\ud800\"}";
    rd_sqs_call_t call;
    char why[256];
    assert_null(decode_json("AmazonSQS.SendMessage", body, sizeof body - 1, &call, why));
    const char *b = cJSON_GetObjectItem(call.params, "MessageBody")->valuestring;
    assert_false(rd_sqs_body_chars_ok(b, strlen(b)));
    b = cJSON_GetObjectItem(call.params, "B")->valuestring;
    assert_false(rd_sqs_body_chars_ok(b, strlen(b)));
    rd_sqs_call_clear(&call);
}

/* ---------------------------------------------------------------------------
 * Encoding: JSON
 * ------------------------------------------------------------------------- */

static void test_json_results(void **state)
{
    rd_buf_t out = RD_BUF_INIT;
    const char *ct = NULL;
    rd_sqs_encode_result(&out, RD_SQS_JSON, "DeleteQueue", NULL, "r1", &ct);
    assert_string_equal(ct, "application/x-amz-json-1.0");
    assert_string_equal(out.data, "{}");
    rd_buf_reset(&out);
    cJSON *r = parse_json("{\"Messages\":[{\"MessageId\":\"m\",\"Body\":\"a\\nb\"}],\"N\":17}");
    rd_sqs_encode_result(&out, RD_SQS_JSON, "ReceiveMessage", r, "r1", &ct);
    assert_string_equal(out.data, "{\"Messages\":[{\"MessageId\":\"m\",\"Body\":\"a\\nb\"}],\"N\":17}");
    cJSON_Delete(r);
    /* Bytes that are no UTF-8 never make the answer invalid JSON. */
    rd_buf_reset(&out);
    r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "Body", "ok\xff\xc3");
    cJSON_AddStringToObject(r, "bad\xfe", "v");
    rd_sqs_encode_result(&out, RD_SQS_JSON, "ReceiveMessage", r, "r1", &ct);
    assert_true(rd_utf8_valid(out.data, out.len));
    rd_json_t *back = rd_json_parse(out.data, out.len, NULL);
    assert_non_null(back);
    assert_string_equal(rd_json_string(rd_json_get(back, "Body")), "ok\xef\xbf\xbd\xef\xbf\xbd");
    rd_json_free(back);
    /* ... and the caller's tree is left as it was. */
    assert_string_equal(cJSON_GetObjectItem(r, "Body")->valuestring, "ok\xff\xc3");
    cJSON_Delete(r);
    rd_buf_free(&out);
}

/* The error shape @aws-sdk/client-sqs and botocore read: __type's shape name
 * and the query code in x-amzn-query-error. */
static void test_json_errors(void **state)
{
    rd_buf_t out = RD_BUF_INIT, headers = RD_BUF_INIT;
    const char *ct = NULL;
    rd_sqs_encode_error(&out, &headers, RD_SQS_JSON, &RD_SQS_ERR_QUEUE_DOES_NOT_EXIST,
                        "The specified queue does not exist.", "r1", &ct);
    assert_string_equal(ct, "application/x-amz-json-1.0");
    assert_string_equal(headers.data, "x-amzn-query-error: AWS.SimpleQueueService.NonExistentQueue;Sender\r\n");
    rd_json_t *doc = rd_json_parse(out.data, out.len, NULL);
    assert_non_null(doc);
    assert_string_equal(rd_json_string(rd_json_get(doc, "__type")), "com.amazonaws.sqs#QueueDoesNotExist");
    assert_string_equal(rd_json_string(rd_json_get(doc, "message")), "The specified queue does not exist.");
    rd_json_free(doc);
    rd_buf_reset(&out);
    rd_buf_reset(&headers);
    rd_sqs_encode_error(&out, &headers, RD_SQS_JSON, &RD_SQS_ERR_SERVICE_UNAVAILABLE, NULL, "r1", &ct);
    assert_string_equal(headers.data, "x-amzn-query-error: ServiceUnavailable;Receiver\r\n");
    assert_string_equal(out.data, "{\"__type\":\"com.amazonaws.sqs#ServiceUnavailable\"}");
    rd_buf_free(&out);
    rd_buf_free(&headers);
}

/* The rows of errors.h as SQS's models give them. */
static void test_error_rows(void **state)
{
    assert_string_equal(RD_SQS_ERR_QUEUE_ALREADY_EXISTS.code, "QueueNameExists");
    assert_string_equal(RD_SQS_ERR_QUEUE_ALREADY_EXISTS.query_code, "QueueAlreadyExists");
    assert_string_equal(RD_SQS_ERR_PURGE_IN_PROGRESS.query_code, "AWS.SimpleQueueService.PurgeQueueInProgress");
    assert_int_equal(RD_SQS_ERR_PURGE_IN_PROGRESS.status, 403);
    assert_int_equal(RD_SQS_ERR_MALFORMED_QUERY.status, 404);
    assert_int_equal(RD_SQS_ERR_REQUEST_EXPIRED.status, 400);
    assert_int_equal(RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH.status, 403);
    assert_false(RD_SQS_ERR_INTERNAL.sender);
}

/* ---------------------------------------------------------------------------
 * Encoding: XML, read back by libxml2 and botocore
 * ------------------------------------------------------------------------- */

/* Results in the JSON shape, one per action botocore's 1.29 model has an
 * output for (StartMessageMoveTask and friends are JSON-only there). */
static const struct {
    const char *action;
    const char *result;
} XML_RESULTS[] = {
    { "CreateQueue", "{\"QueueUrl\":\"http://h/000000000000/q\"}" },
    { "GetQueueUrl", "{\"QueueUrl\":\"http://h/000000000000/q\"}" },
    { "ListQueues", "{\"QueueUrls\":[\"http://h/0/a\",\"http://h/0/b\"],\"NextToken\":\"YQ\"}" },
    { "ListQueues", "{}" },
    { "GetQueueAttributes", "{\"Attributes\":{\"VisibilityTimeout\":\"30\",\"QueueArn\":"
                            "\"arn:aws:sqs:us-east-1:0:q\",\"RedrivePolicy\":"
                            "\"{\\\"deadLetterTargetArn\\\":\\\"a\\\",\\\"maxReceiveCount\\\":5}\"}}" },
    { "SendMessage", "{\"MessageId\":\"00000001-0000-4000-8000-000000000002\",\"MD5OfMessageBody\":"
                     "\"5d41402abc4b2a76b9719d911017c592\",\"MD5OfMessageAttributes\":"
                     "\"d41d8cd98f00b204e9800998ecf8427e\",\"SequenceNumber\":\"00000000000000000002\"}" },
    { "SendMessageBatch", "{\"Successful\":[{\"Id\":\"a\",\"MessageId\":\"m1\",\"MD5OfMessageBody\":\"x\"},"
                          "{\"Id\":\"b\",\"MessageId\":\"m2\",\"MD5OfMessageBody\":\"y\"}],"
                          "\"Failed\":[{\"Id\":\"c\",\"SenderFault\":true,\"Code\":\"InvalidMessageContents\","
                          "\"Message\":\"bad <body> & more\"}]}" },
    { "ReceiveMessage", "{\"Messages\":[{\"MessageId\":\"m1\",\"ReceiptHandle\":\"MTox+/=\",\"MD5OfBody\":"
                        "\"x\",\"Body\":\"line\\r\\nnext\\ttab <&> \\\"q\\\" 'a' \\u00e9\\ud83d\\ude00\","
                        "\"Attributes\":{\"SentTimestamp\":\"1700000000000\",\"ApproximateReceiveCount\":\"2\"},"
                        "\"MD5OfMessageAttributes\":\"y\",\"MessageAttributes\":{\"s\":{\"StringValue\":\"v\","
                        "\"DataType\":\"String\"},\"b\":{\"BinaryValue\":\"AAH+/w==\",\"DataType\":\"Binary\"}}},"
                        "{\"MessageId\":\"m2\",\"ReceiptHandle\":\"h\",\"MD5OfBody\":\"z\",\"Body\":\" \"}]}" },
    { "ReceiveMessage", "{}" },
    { "DeleteMessageBatch", "{\"Successful\":[{\"Id\":\"a\"}],\"Failed\":[{\"Id\":\"b\",\"SenderFault\":false,"
                            "\"Code\":\"InternalFailure\"}]}" },
    { "ChangeMessageVisibilityBatch", "{\"Successful\":[{\"Id\":\"a\"},{\"Id\":\"b\"}],\"Failed\":[]}" },
    { "ListQueueTags", "{\"Tags\":{\"team\":\"payments\",\"empty\":\"\"}}" },
    { "ListDeadLetterSourceQueues", "{\"queueUrls\":[\"http://h/0/src\"],\"NextToken\":\"t\"}" },
};

/* botocore leaves out empty lists; so does this copy of want. */
static void drop_empty_lists(cJSON *j)
{
    for (cJSON *c = j ? j->child : NULL, *next; c; c = next) {
        next = c->next;
        if (cJSON_IsArray(c) && c->child == NULL && c->string) cJSON_DeleteItemFromObject(j, c->string);
        else drop_empty_lists(c);
    }
}

static void test_xml_results_read_by_botocore(void **state)
{
    bool botocore = have_botocore();
    if (!botocore) print_message("Debian's botocore is missing: libxml2 checks only\n");
    for (size_t i = 0; i < sizeof XML_RESULTS / sizeof XML_RESULTS[0]; i++) {
        cJSON *result = parse_json(XML_RESULTS[i].result);
        rd_buf_t out = RD_BUF_INIT;
        const char *ct = NULL;
        rd_sqs_encode_result(&out, RD_SQS_QUERY, XML_RESULTS[i].action, result, "req-1", &ct);
        assert_string_equal(ct, "text/xml");
        xmlDocPtr doc = parse_xml(&out);
        if (doc == NULL) fail_msg("not well-formed: %s", out.data);
        xmlNodePtr root = xmlDocGetRootElement(doc);
        char want_root[96];
        snprintf(want_root, sizeof want_root, "%sResponse", XML_RESULTS[i].action);
        assert_string_equal((const char *)root->name, want_root);
        assert_string_equal((const char *)root->ns->href, "http://queue.amazonaws.com/doc/2012-11-05/");
        xmlFreeDoc(doc);
        if (botocore) {
            cJSON *got = botocore_parse(XML_RESULTS[i].action, 200, &out);
            cJSON *want = cJSON_Duplicate(result, true);
            drop_empty_lists(want);
            cJSON_AddStringToObject(want, "RequestId", "req-1");
            assert_json_equal(got, want);
            cJSON_Delete(got);
            cJSON_Delete(want);
        }
        cJSON_Delete(result);
        rd_buf_free(&out);
    }
}

/* Actions without output have no <ActionResult>; botocore reads them as {}. */
static void test_xml_empty_outputs(void **state)
{
    static const char *const actions[] = { "DeleteQueue", "DeleteMessage", "PurgeQueue",
                                           "SetQueueAttributes", "ChangeMessageVisibility",
                                           "TagQueue", "UntagQueue" };
    for (size_t i = 0; i < sizeof actions / sizeof actions[0]; i++) {
        rd_buf_t out = RD_BUF_INIT;
        const char *ct;
        rd_sqs_encode_result(&out, RD_SQS_QUERY, actions[i], NULL, "req-2", &ct);
        assert_null(strstr(out.data, "Result>"));
        assert_non_null(strstr(out.data, "<RequestId>req-2</RequestId>"));
        xmlDocPtr doc = parse_xml(&out);
        assert_non_null(doc);
        xmlFreeDoc(doc);
        if (have_botocore()) {
            cJSON *got = botocore_parse(actions[i], 200, &out);
            cJSON *want = parse_json("{\"RequestId\":\"req-2\"}");
            assert_json_equal(got, want);
            cJSON_Delete(got);
            cJSON_Delete(want);
        }
        rd_buf_free(&out);
    }
    /* An action with output always has its Result element, even empty. */
    rd_buf_t out = RD_BUF_INIT;
    const char *ct;
    rd_sqs_encode_result(&out, RD_SQS_QUERY, "ReceiveMessage", NULL, "r", &ct);
    assert_non_null(strstr(out.data, "<ReceiveMessageResult/>"));
    rd_buf_free(&out);
}

/* StartMessageMoveTask and ListMessageMoveTasks: botocore 1.29 has no query
 * model for them, so libxml2 checks the element names of the brief. */
static void test_xml_move_tasks(void **state)
{
    cJSON *r = parse_json("{\"Results\":[{\"TaskHandle\":\"t\",\"Status\":\"RUNNING\","
                          "\"ApproximateNumberOfMessagesMoved\":3,\"StartedTimestamp\":1700000000000}]}");
    rd_buf_t out = RD_BUF_INIT;
    const char *ct;
    rd_sqs_encode_result(&out, RD_SQS_QUERY, "ListMessageMoveTasks", r, "r", &ct);
    assert_non_null(strstr(out.data, "<ListMessageMoveTasksResult><ListMessageMoveTasksResultEntry>"
                                     "<TaskHandle>t</TaskHandle><Status>RUNNING</Status>"
                                     "<ApproximateNumberOfMessagesMoved>3</ApproximateNumberOfMessagesMoved>"
                                     "<StartedTimestamp>1700000000000</StartedTimestamp>"
                                     "</ListMessageMoveTasksResultEntry></ListMessageMoveTasksResult>"));
    cJSON_Delete(r);
    rd_buf_free(&out);
}

static void test_xml_errors(void **state)
{
    rd_buf_t out = RD_BUF_INIT, headers = RD_BUF_INIT;
    const char *ct;
    rd_sqs_encode_error(&out, &headers, RD_SQS_QUERY, &RD_SQS_ERR_QUEUE_DOES_NOT_EXIST,
                        "The queue <q> & co does not exist.", "req-3", &ct);
    assert_string_equal(ct, "text/xml");
    assert_int_equal(headers.len, 0);
    xmlDocPtr doc = parse_xml(&out);
    assert_non_null(doc);
    assert_string_equal((const char *)xmlDocGetRootElement(doc)->name, "ErrorResponse");
    xmlFreeDoc(doc);
    if (have_botocore()) {
        cJSON *got = botocore_parse("GetQueueUrl", 400, &out);
        cJSON *want = parse_json("{\"Error\":{\"Type\":\"Sender\",\"Code\":\"AWS.SimpleQueueService.NonExistentQueue\","
                                 "\"Message\":\"The queue <q> & co does not exist.\",\"Detail\":\"\"},"
                                 "\"RequestId\":\"req-3\"}");
        /* botocore keeps <Detail/> as None or "": compare the rest. */
        cJSON_DeleteItemFromObject(cJSON_GetObjectItem(got, "Error"), "Detail");
        cJSON_DeleteItemFromObject(cJSON_GetObjectItem(want, "Error"), "Detail");
        assert_json_equal(got, want);
        cJSON_Delete(got);
        cJSON_Delete(want);
    }
    rd_buf_free(&out);
    rd_buf_free(&headers);
}

/* Characters XML cannot carry become U+FFFD; CR, tab and markup survive. */
static void test_xml_never_malformed(void **state)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "QueueUrl", "a\x01" "b\xff" "c\xef\xbf\xbe" "d\r\n\t<&>]]>e");
    rd_buf_t out = RD_BUF_INIT;
    const char *ct;
    rd_sqs_encode_result(&out, RD_SQS_QUERY, "GetQueueUrl", r, "id\x02", &ct);
    xmlDocPtr doc = parse_xml(&out);
    if (doc == NULL) fail_msg("not well-formed: %s", out.data);
    xmlNodePtr result = xmlDocGetRootElement(doc)->children;
    xmlChar *t = xmlNodeGetContent(result->children);
    assert_string_equal((const char *)t, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd" "d\r\n\t<&>]]>e");
    xmlFree(t);
    xmlFreeDoc(doc);
    /* A name that is no XML name is escaped too, never written raw. */
    cJSON_Delete(r);
    r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "a b<c", "v");
    rd_buf_reset(&out);
    rd_sqs_encode_result(&out, RD_SQS_QUERY, "GetQueueUrl", r, "id", &ct);
    doc = parse_xml(&out);
    assert_non_null(doc);
    xmlFreeDoc(doc);
    cJSON_Delete(r);
    rd_buf_free(&out);
}

/* ---------------------------------------------------------------------------
 * Attributes and MD5
 * ------------------------------------------------------------------------- */

static void test_md5_hex(void **state)
{
    char hex[33];
    /* RFC 1321's test suite. */
    rd_sqs_md5_hex("", 0, hex);
    assert_string_equal(hex, "d41d8cd98f00b204e9800998ecf8427e");
    rd_sqs_md5_hex("abc", 3, hex);
    assert_string_equal(hex, "900150983cd24fb0d6963f7d28e17f72");
}

/* Packing gives the bytes whose MD5 SQS answers, and unpacks losslessly. */
static void test_md5_of_attributes_vectors(void **state)
{
    char **lines = read_lines("tests/fixtures/sqs/md5.tsv");
    size_t count = 0;
    for (char **l = lines; *l; l++, count++) {
        char *f[2];
        assert_int_equal(split_tabs(*l, f, 2), 2);
        cJSON *attrs = parse_json(f[0]);
        rd_buf_t blob = RD_BUF_INIT;
        size_t size = 0;
        char why[256];
        if (rd_sqs_attributes_pack(attrs, &blob, &size, why, sizeof why) != 0) fail_msg("%s: %s", f[0], why);
        assert_true(size > 0);
        char hex[33];
        rd_sqs_md5_hex(blob.data, blob.len, hex);
        assert_string_equal(hex, f[1]);
        cJSON *back = rd_sqs_attributes_unpack(blob.data, blob.len, NULL, NULL);
        assert_json_equal(back, attrs);
        cJSON_Delete(back);
        cJSON_Delete(attrs);
        rd_buf_free(&blob);
    }
    assert_true(count >= 5);
    free_lines(lines);
}

static bool want_prefix_k(const char *name, void *arg)
{
    return strncmp(name, (const char *)arg, strlen((const char *)arg)) == 0;
}

/* A receive asking for some attributes digests only those. */
static void test_select(void **state)
{
    cJSON *all = parse_json("{\"k1\":{\"DataType\":\"String\",\"StringValue\":\"a\"},"
                            "\"x\":{\"DataType\":\"Number\",\"StringValue\":\"2\"},"
                            "\"k2\":{\"DataType\":\"Binary\",\"BinaryValue\":\"AQI=\"}}");
    cJSON *some = parse_json("{\"k1\":{\"DataType\":\"String\",\"StringValue\":\"a\"},"
                             "\"k2\":{\"DataType\":\"Binary\",\"BinaryValue\":\"AQI=\"}}");
    rd_buf_t blob = RD_BUF_INIT, want = RD_BUF_INIT, got = RD_BUF_INIT;
    size_t size;
    char why[256];
    assert_int_equal(rd_sqs_attributes_pack(all, &blob, &size, why, sizeof why), 0);
    assert_int_equal(size, 2 + 6 + 1 + 1 + 6 + 1 + 2 + 6 + 2);
    assert_int_equal(rd_sqs_attributes_pack(some, &want, &size, why, sizeof why), 0);
    assert_int_equal(rd_sqs_attributes_select(blob.data, blob.len, want_prefix_k, "k", &got), 0);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.data, want.data, want.len);
    cJSON *unpacked = rd_sqs_attributes_unpack(blob.data, blob.len, want_prefix_k, "k");
    assert_json_equal(unpacked, some);
    cJSON_Delete(unpacked);
    /* Blobs cut inside an attribute, or altered, do not decode. The blob
     * holds k1, k2, x in that order: cuts between them are whole blobs. */
    cJSON *first = parse_json("{\"k1\":{\"DataType\":\"String\",\"StringValue\":\"a\"}}");
    rd_buf_t first_blob = RD_BUF_INIT;
    assert_int_equal(rd_sqs_attributes_pack(first, &first_blob, &size, why, sizeof why), 0);
    cJSON_Delete(first);
    for (size_t cut = 1; cut < blob.len; cut++) {
        if (cut == first_blob.len || cut == want.len) continue;
        rd_buf_t sink = RD_BUF_INIT;
        assert_null(rd_sqs_attributes_unpack(blob.data, cut, NULL, NULL));
        assert_int_equal(rd_sqs_attributes_select(blob.data, cut, NULL, NULL, &sink), -1);
        assert_int_equal(sink.len, 0);
        rd_buf_free(&sink);
    }
    rd_buf_free(&first_blob);
    blob.data[4 + 2 + 4 + 6] = 9;  /* the first transport byte */
    assert_null(rd_sqs_attributes_unpack(blob.data, blob.len, NULL, NULL));
    cJSON *empty = rd_sqs_attributes_unpack("", 0, NULL, NULL);
    assert_int_equal(cJSON_GetArraySize(empty), 0);
    cJSON_Delete(empty);
    cJSON_Delete(all);
    cJSON_Delete(some);
    rd_buf_free(&blob);
    rd_buf_free(&want);
    rd_buf_free(&got);
}

static void assert_pack_refused(const char *attrs_json)
{
    cJSON *attrs = parse_json(attrs_json);
    rd_buf_t blob = RD_BUF_INIT;
    rd_buf_puts(&blob, "keep");
    size_t size = 1;
    char why[256] = "";
    if (rd_sqs_attributes_pack(attrs, &blob, &size, why, sizeof why) != -1) fail_msg("accepted %s", attrs_json);
    assert_true(why[0] != '\0');
    assert_int_equal(blob.len, 4);
    assert_int_equal(size, 0);
    cJSON_Delete(attrs);
    rd_buf_free(&blob);
}

static void assert_pack_ok(const char *attrs_json)
{
    cJSON *attrs = parse_json(attrs_json);
    rd_buf_t blob = RD_BUF_INIT;
    size_t size;
    char why[256];
    if (rd_sqs_attributes_pack(attrs, &blob, &size, why, sizeof why) != 0) fail_msg("%s: %s", attrs_json, why);
    cJSON_Delete(attrs);
    rd_buf_free(&blob);
}

#define S(name, type, value) "{\"" name "\":{\"DataType\":\"" type "\",\"StringValue\":\"" value "\"}}"

static void test_pack_validation(void **state)
{
    assert_pack_ok(S("a-b_c.D9", "String", "v"));
    assert_pack_ok(S("awsx", "String.custom label", "v"));
    assert_pack_ok(S("n", "Number", "-0.5E+3"));
    assert_pack_ok(S("n", "Number", "12345678901234567890123456789012345678"));
    assert_pack_ok(S("n", "Number.int", "1e126"));
    assert_pack_ok(S("n", "Number", "1e-128"));
    assert_pack_refused(S("AWS.x", "String", "v"));
    assert_pack_refused(S("amazon.x", "String", "v"));
    assert_pack_refused(S(".a", "String", "v"));
    assert_pack_refused(S("a.", "String", "v"));
    assert_pack_refused(S("a..b", "String", "v"));
    assert_pack_refused(S("a b", "String", "v"));
    assert_pack_refused(S("", "String", "v"));
    assert_pack_refused(S("a", "Str", "v"));
    assert_pack_refused(S("a", "String.", "v"));
    assert_pack_refused(S("a", "string", "v"));
    assert_pack_refused(S("a", "", "v"));
    assert_pack_refused(S("a", "String", ""));
    assert_pack_refused(S("a", "String", "\\u0001"));
    assert_pack_refused(S("a", "String", "\\uffff"));
    assert_pack_refused(S("n", "Number", "abc"));
    assert_pack_refused(S("n", "Number", "1e"));
    assert_pack_refused(S("n", "Number", "."));
    assert_pack_refused(S("n", "Number", "1.2.3"));
    assert_pack_refused(S("n", "Number", "123456789012345678901234567890123456789"));
    assert_pack_refused(S("n", "Number", "1e127"));
    assert_pack_refused(S("n", "Number", "1e-129"));
    assert_pack_refused(S("b", "Binary", "AQI="));  /* a Binary needs BinaryValue */
    assert_pack_refused("{\"b\":{\"DataType\":\"Binary\",\"BinaryValue\":\"AQI\"}}");
    assert_pack_refused("{\"b\":{\"DataType\":\"Binary\",\"BinaryValue\":\"A=QI\"}}");
    assert_pack_refused("{\"b\":{\"DataType\":\"Binary\",\"BinaryValue\":\"AQ I\"}}");
    assert_pack_refused("{\"b\":{\"DataType\":\"Binary\",\"BinaryValue\":\"\"}}");
    assert_pack_refused("{\"l\":{\"DataType\":\"String\",\"StringValue\":\"v\",\"StringListValues\":[\"x\"]}}");
    assert_pack_refused("{\"s\":\"not a structure\"}");
    assert_pack_refused("[]");
    assert_pack_refused("{\"a\":{\"DataType\":\"String\",\"StringValue\":\"1\"},"
                        "\"a\":{\"DataType\":\"String\",\"StringValue\":\"2\"}}");
    /* At most 10. */
    rd_buf_t many = RD_BUF_INIT;
    rd_buf_puts(&many, "{");
    for (int i = 0; i < 11; i++)
        rd_buf_printf(&many, "%s\"a%d\":{\"DataType\":\"String\",\"StringValue\":\"v\"}", i ? "," : "", i);
    rd_buf_puts(&many, "}");
    assert_pack_refused(many.data);
    rd_buf_free(&many);
    /* A name of 256 characters passes, 257 does not. */
    char name[300], text[400];
    memset(name, 'n', 257);
    name[256] = '\0';
    snprintf(text, sizeof text, S("%s", "String", "v"), name);
    assert_pack_ok(text);
    name[256] = 'n';
    name[257] = '\0';
    snprintf(text, sizeof text, S("%s", "String", "v"), name);
    assert_pack_refused(text);
    /* Nothing to pack is no error. */
    rd_buf_t blob = RD_BUF_INIT;
    size_t size = 5;
    char why[64];
    assert_int_equal(rd_sqs_attributes_pack(NULL, &blob, &size, why, sizeof why), 0);
    assert_int_equal(size, 0);
    assert_int_equal(blob.len, 0);
}

static void test_body_chars(void **state)
{
    assert_true(rd_sqs_body_chars_ok("", 0));
    assert_true(rd_sqs_body_chars_ok("a\t\n\r \xc3\xa9\xee\x80\x80\xef\xbf\xbd\xf4\x8f\xbf\xbf", 17));
    assert_false(rd_sqs_body_chars_ok("\0", 1));
    assert_false(rd_sqs_body_chars_ok("\x1f", 1));
    assert_false(rd_sqs_body_chars_ok("\xef\xbf\xbe", 3));  /* U+FFFE */
    assert_false(rd_sqs_body_chars_ok("\xef\xbf\xbf", 3));  /* U+FFFF */
    assert_false(rd_sqs_body_chars_ok("\xed\xa0\x80", 3));  /* a surrogate */
    assert_false(rd_sqs_body_chars_ok("\xc0\x80", 2));      /* overlong NUL */
    assert_false(rd_sqs_body_chars_ok("\xe2\x82", 2));      /* cut short */
    assert_true(rd_sqs_body_chars_ok("\x7f", 1));           /* DEL is #x20-#xD7FF */
}

int main(void)
{
    rd_alloc_init();
    xmlInitParser();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_botocore_forms),
        cmocka_unit_test(test_botocore_forms_in_query_string),
        cmocka_unit_test(test_list_order_follows_n_with_gaps),
        cmocka_unit_test(test_tags_member_per_action),
        cmocka_unit_test(test_message_attribute_lists_and_system_attributes),
        cmocka_unit_test(test_unknown_names_stay_plain),
        cmocka_unit_test(test_envelope_taken_out),
        cmocka_unit_test(test_duplicates_last_wins),
        cmocka_unit_test(test_form_body_content_types),
        cmocka_unit_test(test_malformed_forms),
        cmocka_unit_test(test_too_many_parameters),
        cmocka_unit_test(test_nul_refused_in_query),
        cmocka_unit_test(test_invalid_utf8_kept),
        cmocka_unit_test(test_json_bodies),
        cmocka_unit_test(test_json_malformed),
        cmocka_unit_test(test_json_shapes),
        cmocka_unit_test(test_wire_text),
        cmocka_unit_test(test_nul_refused_in_json),
        cmocka_unit_test(test_json_invalid_utf8_kept),
        cmocka_unit_test(test_json_results),
        cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_error_rows),
        cmocka_unit_test(test_xml_results_read_by_botocore),
        cmocka_unit_test(test_xml_empty_outputs),
        cmocka_unit_test(test_xml_move_tasks),
        cmocka_unit_test(test_xml_errors),
        cmocka_unit_test(test_xml_never_malformed),
        cmocka_unit_test(test_md5_hex),
        cmocka_unit_test(test_md5_of_attributes_vectors),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_pack_validation),
        cmocka_unit_test(test_body_chars),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    xmlCleanupParser();
    return rc;
}
