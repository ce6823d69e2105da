/* test_e2e_sqs.c - the SQS endpoint (docs/sqs.md) end to end: the real
 * build/retryd with --sqs-listen, raw HTTP/1.1 requests in both wire
 * protocols. The error shapes SDKs map back (JSON: __type and the
 * x-amzn-query-error header; query: the XML ErrorResponse; the statuses of
 * docs/sqs.md "Errors"), and each action's happy path once in each protocol.
 * The clients nobody here wrote are tests/sqs_clients_test.sh; the hostile
 * ones tests/sqs_faults_test.sh. */
#define E2E_SUITE "e2e_sqs"
#include "e2e_common.h"

#include <cJSON.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <poll.h>

#include "retryd/sqs/attributes.h"

static int g_sqs_port;
static char g_sqs[64];            /* http://127.0.0.1:<port> */

/* ------------------------------------------------------------------------ */
/* Raw exchanges                                                            */
/* ------------------------------------------------------------------------ */

typedef struct sqs_answer {
    int status;
    char content_type[128];
    char query_error[160];        /* x-amzn-query-error, "" when absent */
    char request_id[64];          /* x-amzn-RequestId */
    char *body;
    size_t body_len;
    cJSON *json;                  /* a JSON answer, parsed */
    xmlDocPtr xml;                /* an XML answer, parsed */
} sqs_answer_t;

static void answer_free(sqs_answer_t *a)
{
    free(a->body);
    cJSON_Delete(a->json);
    if (a->xml) xmlFreeDoc(a->xml);
    memset(a, 0, sizeof *a);
}

static void header_value(const char *head, const char *lname, char *out, size_t cap)
{
    out[0] = '\0';
    size_t n = strlen(lname);
    for (const char *l = strstr(head, "\r\n"); l && l[2] != '\r'; l = strstr(l + 2, "\r\n")) {
        const char *name = l + 2;
        if (strncasecmp(name, lname, n) != 0 || name[n] != ':') continue;
        const char *v = name + n + 1;
        while (*v == ' ') v++;
        size_t len = strcspn(v, "\r");
        snprintf(out, cap, "%.*s", (int)(len < cap ? len : cap - 1), v);
        return;
    }
}

/* Reads one answer from fd. */
static void read_answer(int fd, sqs_answer_t *a)
{
    memset(a, 0, sizeof *a);
    rd_buf_t in = RD_BUF_INIT;
    char chunk[65536];
    size_t head_len = 0, need = 0;
    for (;;) {
        ssize_t got = read(fd, chunk, sizeof chunk);
        if (got <= 0) break;
        rd_buf_append(&in, chunk, (size_t)got);
        rd_buf_append(&in, "", 1);
        in.len--;
        char *end = strstr(in.data, "\r\n\r\n");
        if (end == NULL) continue;
        head_len = (size_t)(end - in.data) + 4;
        char cl[32];
        header_value(in.data, "content-length", cl, sizeof cl);
        need = (size_t)strtoull(cl, NULL, 10);
        if (in.len >= head_len + need) break;
    }
    assert_true(head_len > 0 && in.len >= head_len + need);
    assert_true(strncmp(in.data, "HTTP/1.1 ", 9) == 0);
    a->status = atoi(in.data + 9);
    in.data[head_len - 2] = '\0';
    header_value(in.data, "content-type", a->content_type, sizeof a->content_type);
    header_value(in.data, "x-amzn-query-error", a->query_error, sizeof a->query_error);
    header_value(in.data, "x-amzn-requestid", a->request_id, sizeof a->request_id);
    a->body = malloc(need + 1);
    memcpy(a->body, in.data + head_len, need);
    a->body[need] = '\0';
    a->body_len = need;
    rd_buf_free(&in);
    if (strcmp(a->content_type, "application/x-amz-json-1.0") == 0) {
        a->json = cJSON_ParseWithLength(a->body, a->body_len);
        assert_non_null(a->json);
    } else if (strcmp(a->content_type, "text/xml") == 0) {
        a->xml = xmlReadMemory(a->body, (int)a->body_len, NULL, NULL, XML_PARSE_NONET);
        assert_non_null(a->xml);
    }
}

/* Sends req (complete bytes) on a new connection and reads one answer. */
static void exchange(const char *req, size_t len, sqs_answer_t *a)
{
    int fd = e2e_connect(g_sqs_port);
    assert_true(fd >= 0);
    assert_int_equal(e2e_send_all(fd, req, len), 0);
    read_answer(fd, a);
    close(fd);
}

static void request_bytes(rd_buf_t *req, const char *headers, const char *body, size_t len)
{
    rd_buf_printf(req, "POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%sContent-Length: %zu\r\n\r\n",
                  g_sqs_port, headers, len);
    rd_buf_append(req, body, len);
}

static void post(const char *headers, const char *body, size_t len, sqs_answer_t *a)
{
    rd_buf_t req = RD_BUF_INIT;
    request_bytes(&req, headers, body, len);
    exchange(req.data, req.len, a);
    rd_buf_free(&req);
}

static const char *json_headers(const char *action)
{
    return e2e_fmt("Content-Type: application/x-amz-json-1.0\r\nX-Amz-Target: AmazonSQS.%s\r\n",
                   action);
}

/* A JSON-protocol request: X-Amz-Target AmazonSQS.<action>. */
static void json_call(const char *action, const char *body, sqs_answer_t *a)
{
    post(json_headers(action), body, strlen(body), a);
}

/* Sends a JSON-protocol request on fd (an open connection). */
static void json_send(int fd, const char *action, const char *body)
{
    rd_buf_t req = RD_BUF_INIT;
    request_bytes(&req, json_headers(action), body, strlen(body));
    assert_int_equal(e2e_send_all(fd, req.data, req.len), 0);
    rd_buf_free(&req);
}

/* A query-protocol request: a form body. */
static void query_call(const char *form, sqs_answer_t *a)
{
    post("Content-Type: application/x-www-form-urlencoded; charset=utf-8\r\n", form, strlen(form), a);
}

static const char *json_str(const sqs_answer_t *a, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a->json, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The text of the first element named name in the XML answer, "" if none
 * (an e2e_fmt buffer). */
static const char *xml_text_of(xmlNodePtr n, const char *name)
{
    for (; n; n = n->next) {
        if (n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0) {
            xmlChar *t = xmlNodeGetContent(n);
            const char *s = e2e_fmt("%s", t ? (const char *)t : "");
            xmlFree(t);
            return s;
        }
        const char *in = xml_text_of(n->children, name);
        if (in) return in;
    }
    return NULL;
}

static const char *xml_text(const sqs_answer_t *a, const char *name)
{
    assert_non_null(a->xml);
    const char *s = xml_text_of(xmlDocGetRootElement(a->xml), name);
    return s ? s : "";
}

static int xml_count_of(xmlNodePtr n, const char *name)
{
    int c = 0;
    for (; n; n = n->next) {
        if (n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0) c++;
        c += xml_count_of(n->children, name);
    }
    return c;
}

static int xml_count(const sqs_answer_t *a, const char *name)
{
    return xml_count_of(xmlDocGetRootElement(a->xml), name);
}

static const char *md5_hex(const char *s)
{
    char out[33];
    rd_sqs_md5_hex(s, strlen(s), out);
    return e2e_fmt("%s", out);
}

static const char *url_of(const char *queue)
{
    return e2e_fmt("%s/000000000000/%s", g_sqs, queue);
}

/* ------------------------------------------------------------------------ */
/* Error shapes                                                             */
/* ------------------------------------------------------------------------ */

/* JSON: status, __type "com.amazonaws.sqs#<code>", a message, and the
 * x-amzn-query-error header "<query code>;Sender". */
static void assert_json_error(const sqs_answer_t *a, int status, const char *code,
                              const char *query_code)
{
    if (a->status != status) fail_msg("status %d, want %d: %s", a->status, status, a->body);
    assert_string_equal(a->content_type, "application/x-amz-json-1.0");
    assert_string_equal(json_str(a, "__type"), e2e_fmt("com.amazonaws.sqs#%s", code));
    assert_non_null(json_str(a, "message"));
    assert_string_equal(a->query_error, e2e_fmt("%s;Sender", query_code));
    assert_true(strlen(a->request_id) == 36);
}

/* Query: status and <ErrorResponse><Error><Type>Sender</Type><Code>... with
 * the request id, the same as the header's. */
static void assert_xml_error(const sqs_answer_t *a, int status, const char *code)
{
    if (a->status != status) fail_msg("status %d, want %d: %s", a->status, status, a->body);
    assert_string_equal(a->content_type, "text/xml");
    assert_string_equal((const char *)xmlDocGetRootElement(a->xml)->name, "ErrorResponse");
    assert_string_equal(xml_text(a, "Type"), "Sender");
    assert_string_equal(xml_text(a, "Code"), code);
    assert_true(xml_text(a, "Message")[0] != '\0');
    assert_string_equal(xml_text(a, "RequestId"), a->request_id);
    assert_string_equal(a->query_error, "");
}

static void test_json_error_shapes(void **state)
{
    (void)state;
    sqs_answer_t a;
    json_call("NoSuchAction", "{}", &a);
    assert_json_error(&a, 400, "InvalidAction", "InvalidAction");
    answer_free(&a);
    json_call("AddPermission", e2e_fmt("{\"QueueUrl\":\"%s\",\"Label\":\"l\"}", url_of("nope")), &a);
    assert_json_error(&a, 400, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation");
    answer_free(&a);
    json_call("GetQueueUrl", "{\"QueueName\":\"e2e-sqs-missing\"}", &a);
    assert_json_error(&a, 400, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue");
    answer_free(&a);
    json_call("CreateQueue", "{}", &a);
    assert_json_error(&a, 400, "MissingParameter", "MissingParameter");
    answer_free(&a);
    json_call("CreateQueue", "{\"QueueName\":\"bad name\"}", &a);
    assert_json_error(&a, 400, "InvalidParameterValue", "InvalidParameterValue");
    answer_free(&a);
    json_call("ListQueues", "{\"QueueNamePrefix\":", &a);
    assert_json_error(&a, 400, "SerializationException", "SerializationException");
    answer_free(&a);
    json_call("CreateQueue", "{\"QueueName\":\"e2e-sqs-x\",\"Attributes\":[1]}", &a);
    assert_json_error(&a, 400, "SerializationException", "SerializationException");
    answer_free(&a);
    json_call("CreateQueue", "{\"QueueName\":\"e2e-sqs-je\"}", &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    json_call("DeleteMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"ReceiptHandle\":\"!!\"}",
                                       url_of("e2e-sqs-je")), &a);
    assert_json_error(&a, 404, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid");
    answer_free(&a);
    json_call("SendMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"MessageBody\":\"a\\u0001\"}",
                                     url_of("e2e-sqs-je")), &a);
    assert_json_error(&a, 400, "InvalidMessageContents", "InvalidMessageContents");
    answer_free(&a);
    json_call("SendMessageBatch", e2e_fmt("{\"QueueUrl\":\"%s\",\"Entries\":[]}",
                                          url_of("e2e-sqs-je")), &a);
    assert_json_error(&a, 400, "EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest");
    answer_free(&a);
    /* A body over the endpoint's limit: never read, still SQS's error. */
    size_t big = 1024 * 1024 + 1;
    char *body = malloc(big + 1);
    memset(body, 'a', big);
    body[big] = '\0';
    json_call("ListQueues", body, &a);
    assert_json_error(&a, 413, "RequestEntityTooLarge", "RequestEntityTooLarge");
    answer_free(&a);
    free(body);
}

static void test_query_error_shapes(void **state)
{
    (void)state;
    sqs_answer_t a;
    query_call("Action=NoSuchAction", &a);
    assert_xml_error(&a, 400, "InvalidAction");
    answer_free(&a);
    query_call("Version=2012-11-05", &a);
    assert_xml_error(&a, 400, "MissingParameter");
    answer_free(&a);
    query_call("Action=GetQueueUrl&QueueName=e2e-sqs-missing", &a);
    assert_xml_error(&a, 400, "AWS.SimpleQueueService.NonExistentQueue");
    answer_free(&a);
    query_call("Action=CreateQueue&QueueName=%zz", &a);
    assert_xml_error(&a, 404, "MalformedQueryString");
    answer_free(&a);
    query_call("Action=CreateQueue&QueueName=q&Attribute.0.Name=DelaySeconds", &a);
    assert_xml_error(&a, 404, "MalformedQueryString");
    answer_free(&a);
    query_call(e2e_fmt("Action=AddPermission&QueueUrl=%s&Label=l", url_of("nope")), &a);
    assert_xml_error(&a, 400, "AWS.SimpleQueueService.UnsupportedOperation");
    answer_free(&a);
    query_call("Action=ReceiveMessage&QueueUrl=http://x/000000000000/e2e-sqs-missing&"
               "MaxNumberOfMessages=11", &a);
    assert_xml_error(&a, 400, "InvalidParameterValue");
    answer_free(&a);
    /* GET with a query string, as the query protocol allows. */
    const char *get = e2e_fmt("GET /?Action=GetQueueUrl&QueueName=e2e-sqs-missing HTTP/1.1\r\n"
                              "Host: 127.0.0.1\r\n\r\n");
    exchange(get, strlen(get), &a);
    assert_xml_error(&a, 400, "AWS.SimpleQueueService.NonExistentQueue");
    answer_free(&a);
}

/* ------------------------------------------------------------------------ */
/* Happy paths                                                              */
/* ------------------------------------------------------------------------ */

static void test_json_actions(void **state)
{
    (void)state;
    sqs_answer_t a;
    const char *q = "e2e-sqs-jq", *dlq = "e2e-sqs-jq-dlq";
    json_call("CreateQueue", e2e_fmt("{\"QueueName\":\"%s\"}", dlq), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    json_call("CreateQueue", e2e_fmt("{\"QueueName\":\"%s\",\"Attributes\":{\"VisibilityTimeout\":"
                                     "\"40\",\"RedrivePolicy\":\"{\\\"deadLetterTargetArn\\\":"
                                     "\\\"arn:aws:sqs:us-east-1:000000000000:%s\\\","
                                     "\\\"maxReceiveCount\\\":\\\"3\\\"}\"},"
                                     "\"tags\":{\"team\":\"a\"}}", q, dlq), &a);
    assert_int_equal(a.status, 200);
    assert_string_equal(json_str(&a, "QueueUrl"), url_of(q));
    answer_free(&a);
    json_call("GetQueueUrl", e2e_fmt("{\"QueueName\":\"%s\"}", q), &a);
    assert_string_equal(json_str(&a, "QueueUrl"), url_of(q));
    answer_free(&a);
    json_call("ListQueues", "{\"QueueNamePrefix\":\"e2e-sqs-jq\"}", &a);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(a.json, "QueueUrls")), 2);
    answer_free(&a);
    json_call("SetQueueAttributes", e2e_fmt("{\"QueueUrl\":\"%s\",\"Attributes\":"
                                            "{\"DelaySeconds\":\"0\"}}", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    json_call("GetQueueAttributes", e2e_fmt("{\"QueueUrl\":\"%s\",\"AttributeNames\":[\"All\"]}",
                                            url_of(q)), &a);
    cJSON *attrs = cJSON_GetObjectItem(a.json, "Attributes");
    assert_string_equal(cJSON_GetObjectItem(attrs, "VisibilityTimeout")->valuestring, "40");
    assert_non_null(strstr(cJSON_GetObjectItem(attrs, "RedrivePolicy")->valuestring, dlq));
    answer_free(&a);
    json_call("TagQueue", e2e_fmt("{\"QueueUrl\":\"%s\",\"Tags\":{\"env\":\"test\"}}", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    json_call("UntagQueue", e2e_fmt("{\"QueueUrl\":\"%s\",\"TagKeys\":[\"team\"]}", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    json_call("ListQueueTags", e2e_fmt("{\"QueueUrl\":\"%s\"}", url_of(q)), &a);
    cJSON *tags = cJSON_GetObjectItem(a.json, "Tags");
    assert_int_equal(cJSON_GetArraySize(tags), 1);
    assert_string_equal(cJSON_GetObjectItem(tags, "env")->valuestring, "test");
    answer_free(&a);
    json_call("ListDeadLetterSourceQueues", e2e_fmt("{\"QueueUrl\":\"%s\"}", url_of(dlq)), &a);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(a.json, "queueUrls"), 0)->valuestring,
                        url_of(q));
    answer_free(&a);

    json_call("SendMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"MessageBody\":\"one\"}", url_of(q)), &a);
    assert_string_equal(json_str(&a, "MD5OfMessageBody"), md5_hex("one"));
    assert_non_null(json_str(&a, "MessageId"));
    answer_free(&a);
    json_call("SendMessageBatch", e2e_fmt("{\"QueueUrl\":\"%s\",\"Entries\":[{\"Id\":\"a\","
                                          "\"MessageBody\":\"two\"},{\"Id\":\"b\",\"MessageBody\":"
                                          "\"three\"}]}", url_of(q)), &a);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(a.json, "Successful")), 2);
    answer_free(&a);
    json_call("ReceiveMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"MaxNumberOfMessages\":10,"
                                        "\"AttributeNames\":[\"ApproximateReceiveCount\"]}",
                                        url_of(q)), &a);
    cJSON *msgs = cJSON_GetObjectItem(a.json, "Messages");
    assert_int_equal(cJSON_GetArraySize(msgs), 3);
    char handles[3][512];
    for (int i = 0; i < 3; i++) {
        cJSON *m = cJSON_GetArrayItem(msgs, i);
        const char *body = cJSON_GetObjectItem(m, "Body")->valuestring;
        assert_string_equal(cJSON_GetObjectItem(m, "MD5OfBody")->valuestring, md5_hex(body));
        SET(handles[i], cJSON_GetObjectItem(m, "ReceiptHandle")->valuestring);
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "Attributes"),
                                                "ApproximateReceiveCount")->valuestring, "1");
    }
    answer_free(&a);
    json_call("ChangeMessageVisibility", e2e_fmt("{\"QueueUrl\":\"%s\",\"ReceiptHandle\":\"%s\","
                                                 "\"VisibilityTimeout\":60}", url_of(q), handles[0]), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    json_call("ChangeMessageVisibilityBatch",
              e2e_fmt("{\"QueueUrl\":\"%s\",\"Entries\":[{\"Id\":\"x\",\"ReceiptHandle\":\"%s\","
                      "\"VisibilityTimeout\":60}]}", url_of(q), handles[1]), &a);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(a.json, "Successful")), 1);
    answer_free(&a);
    json_call("DeleteMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"ReceiptHandle\":\"%s\"}", url_of(q),
                                       handles[0]), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    json_call("DeleteMessageBatch", e2e_fmt("{\"QueueUrl\":\"%s\",\"Entries\":[{\"Id\":\"x\","
                                            "\"ReceiptHandle\":\"%s\"},{\"Id\":\"y\","
                                            "\"ReceiptHandle\":\"%s\"}]}", url_of(q), handles[1],
                                            handles[2]), &a);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(a.json, "Successful")), 2);
    answer_free(&a);
    e2e_response_t r = { 0 };
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    assert_int_equal(r.status, 200);
    assert_int_equal(e2e_jint(e2e_jget(r.json, "counts"), "succeeded"), 3);
    assert_true(rd_json_bool(e2e_jget(r.json, "sqs")));
    e2e_response_free(&r);

    json_call("SendMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"MessageBody\":\"p\"}", url_of(q)), &a);
    answer_free(&a);
    json_call("PurgeQueue", e2e_fmt("{\"QueueUrl\":\"%s\"}", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    json_call("ReceiveMessage", e2e_fmt("{\"QueueUrl\":\"%s\"}", url_of(q)), &a);
    assert_null(cJSON_GetObjectItem(a.json, "Messages"));
    answer_free(&a);
    json_call("DeleteQueue", e2e_fmt("{\"QueueUrl\":\"%s\"}", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    json_call("GetQueueUrl", e2e_fmt("{\"QueueName\":\"%s\"}", q), &a);
    assert_json_error(&a, 400, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue");
    answer_free(&a);
}

static void test_query_actions(void **state)
{
    (void)state;
    sqs_answer_t a;
    const char *q = "e2e-sqs-qq", *dlq = "e2e-sqs-qq-dlq";
    query_call(e2e_fmt("Action=CreateQueue&QueueName=%s", dlq), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    query_call(e2e_fmt("Action=CreateQueue&QueueName=%s&Attribute.1.Name=VisibilityTimeout&"
                       "Attribute.1.Value=40&Attribute.2.Name=RedrivePolicy&Attribute.2.Value="
                       "%%7B%%22deadLetterTargetArn%%22%%3A%%22arn%%3Aaws%%3Asqs%%3Aus-east-1%%3A"
                       "000000000000%%3A%s%%22%%2C%%22maxReceiveCount%%22%%3A%%223%%22%%7D&"
                       "Tag.1.Key=team&Tag.1.Value=a", q, dlq), &a);
    assert_int_equal(a.status, 200);
    assert_string_equal((const char *)xmlDocGetRootElement(a.xml)->name, "CreateQueueResponse");
    assert_string_equal(xml_text(&a, "QueueUrl"), url_of(q));
    assert_string_equal(xml_text(&a, "RequestId"), a.request_id);
    answer_free(&a);
    query_call(e2e_fmt("Action=GetQueueUrl&QueueName=%s", q), &a);
    assert_string_equal(xml_text(&a, "QueueUrl"), url_of(q));
    answer_free(&a);
    query_call("Action=ListQueues&QueueNamePrefix=e2e-sqs-qq", &a);
    assert_int_equal(xml_count(&a, "QueueUrl"), 2);
    answer_free(&a);
    query_call(e2e_fmt("Action=SetQueueAttributes&QueueUrl=%s&Attribute.1.Name=DelaySeconds&"
                       "Attribute.1.Value=0", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    /* The queue's URL as the path, as some clients send it. */
    const char *form = "Action=GetQueueAttributes&AttributeName.1=VisibilityTimeout";
    post(e2e_fmt("Content-Type: application/x-www-form-urlencoded\r\n"), form, strlen(form), &a);
    assert_xml_error(&a, 400, "MissingParameter");
    answer_free(&a);
    rd_buf_t req = RD_BUF_INIT;
    rd_buf_printf(&req, "POST /000000000000/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                  "application/x-www-form-urlencoded\r\nContent-Length: %zu\r\n\r\n%s", q,
                  strlen(form), form);
    exchange(req.data, req.len, &a);
    rd_buf_free(&req);
    assert_int_equal(a.status, 200);
    assert_string_equal(xml_text(&a, "Name"), "VisibilityTimeout");
    assert_string_equal(xml_text(&a, "Value"), "40");
    answer_free(&a);
    query_call(e2e_fmt("Action=TagQueue&QueueUrl=%s&Tag.1.Key=env&Tag.1.Value=test", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    query_call(e2e_fmt("Action=UntagQueue&QueueUrl=%s&TagKey.1=team", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    query_call(e2e_fmt("Action=ListQueueTags&QueueUrl=%s", url_of(q)), &a);
    assert_int_equal(xml_count(&a, "Tag"), 1);
    assert_string_equal(xml_text(&a, "Key"), "env");
    answer_free(&a);
    query_call(e2e_fmt("Action=ListDeadLetterSourceQueues&QueueUrl=%s", url_of(dlq)), &a);
    assert_string_equal(xml_text(&a, "QueueUrl"), url_of(q));
    answer_free(&a);

    query_call(e2e_fmt("Action=SendMessage&QueueUrl=%s&MessageBody=one", url_of(q)), &a);
    assert_string_equal(xml_text(&a, "MD5OfMessageBody"), md5_hex("one"));
    answer_free(&a);
    query_call(e2e_fmt("Action=SendMessageBatch&QueueUrl=%s&SendMessageBatchRequestEntry.1.Id=a&"
                       "SendMessageBatchRequestEntry.1.MessageBody=two&"
                       "SendMessageBatchRequestEntry.2.Id=b&"
                       "SendMessageBatchRequestEntry.2.MessageBody=three", url_of(q)), &a);
    assert_int_equal(xml_count(&a, "SendMessageBatchResultEntry"), 2);
    answer_free(&a);
    query_call(e2e_fmt("Action=ReceiveMessage&QueueUrl=%s&MaxNumberOfMessages=10", url_of(q)), &a);
    assert_int_equal(xml_count(&a, "Message"), 3);
    char handles[3][512];
    int i = 0;
    for (xmlNodePtr n = xmlDocGetRootElement(a.xml)->children; n; n = n->next) {
        if (strcmp((const char *)n->name, "ReceiveMessageResult") != 0) continue;
        for (xmlNodePtr m = n->children; m && i < 3; m = m->next) {
            const char *body = xml_text_of(m->children, "Body");
            assert_string_equal(xml_text_of(m->children, "MD5OfBody"), md5_hex(body));
            SET(handles[i], xml_text_of(m->children, "ReceiptHandle"));
            i++;
        }
    }
    assert_int_equal(i, 3);
    answer_free(&a);
    query_call(e2e_fmt("Action=ChangeMessageVisibility&QueueUrl=%s&ReceiptHandle=%s&"
                       "VisibilityTimeout=60", url_of(q), e2e_url_encode(handles[0])), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    query_call(e2e_fmt("Action=ChangeMessageVisibilityBatch&QueueUrl=%s&"
                       "ChangeMessageVisibilityBatchRequestEntry.1.Id=x&"
                       "ChangeMessageVisibilityBatchRequestEntry.1.ReceiptHandle=%s&"
                       "ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout=60",
                       url_of(q), e2e_url_encode(handles[1])), &a);
    assert_int_equal(xml_count(&a, "ChangeMessageVisibilityBatchResultEntry"), 1);
    answer_free(&a);
    query_call(e2e_fmt("Action=DeleteMessage&QueueUrl=%s&ReceiptHandle=%s", url_of(q),
                       e2e_url_encode(handles[0])), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    query_call(e2e_fmt("Action=DeleteMessageBatch&QueueUrl=%s&"
                       "DeleteMessageBatchRequestEntry.1.Id=x&"
                       "DeleteMessageBatchRequestEntry.1.ReceiptHandle=%s&"
                       "DeleteMessageBatchRequestEntry.2.Id=y&"
                       "DeleteMessageBatchRequestEntry.2.ReceiptHandle=%s", url_of(q),
                       e2e_url_encode(handles[1]), e2e_url_encode(handles[2])), &a);
    assert_int_equal(xml_count(&a, "DeleteMessageBatchResultEntry"), 2);
    answer_free(&a);
    query_call(e2e_fmt("Action=PurgeQueue&QueueUrl=%s", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    query_call(e2e_fmt("Action=DeleteQueue&QueueUrl=%s", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    query_call(e2e_fmt("Action=GetQueueUrl&QueueName=%s", q), &a);
    assert_xml_error(&a, 400, "AWS.SimpleQueueService.NonExistentQueue");
    answer_free(&a);
}

/* /metrics counts the endpoint's requests by action and its errors by code;
 * a request of no known action counts as "other" (it was not counted). */
static void test_metrics_count_requests_and_errors(void **state)
{
    (void)state;
    sqs_answer_t a;
    json_call("NoSuchAction", "{}", &a);
    answer_free(&a);
    /* Two error rows answer InvalidParameterValue (too many tags, a bad
     * value): one series for the code. */
    json_call("CreateQueue", "{\"QueueName\":\"e2e-sqs-m\"}", &a);
    answer_free(&a);
    rd_buf_t tags = RD_BUF_INIT;
    rd_buf_printf(&tags, "{\"QueueUrl\":\"%s\",\"Tags\":{", url_of("e2e-sqs-m"));
    for (int i = 0; i < 51; i++) rd_buf_printf(&tags, "%s\"k%d\":\"v\"", i ? "," : "", i);
    rd_buf_puts(&tags, "}}");
    json_call("TagQueue", tags.data, &a);
    assert_json_error(&a, 400, "InvalidParameterValue", "InvalidParameterValue");
    answer_free(&a);
    rd_buf_free(&tags);
    json_call("ReceiveMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"MaxNumberOfMessages\":11}",
                                        url_of("e2e-sqs-m")), &a);
    assert_json_error(&a, 400, "InvalidParameterValue", "InvalidParameterValue");
    answer_free(&a);
    for (int i = 0; i < 3; i++) {
        json_call("GetQueueUrl", "{\"QueueName\":\"e2e-sqs-nope\"}", &a);
        answer_free(&a);
    }
    /* A queue the HTTP API made is an SQS queue too. */
    e2e_response_t r = { 0 };
    http(&r, "POST", "/queues/e2e-sqs-http/messages", "{\"payload\":\"from http\"}");
    assert_int_equal(r.status, 201);
    e2e_response_free(&r);
    json_call("ReceiveMessage", e2e_fmt("{\"QueueUrl\":\"%s\"}", url_of("e2e-sqs-http")), &a);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(a.json, "Messages"),
                                                               0), "Body")->valuestring, "from http");
    answer_free(&a);
    http(&r, "GET", "/metrics", NULL);
    assert_int_equal(r.status, 200);
    long long urls = -1, missing = -1, other = -1;
    int invalid_series = 0;
    for (char *l = r.body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, "retryd_sqs_requests_total{action=\"GetQueueUrl\"} ", 48) == 0)
            urls = atoll(l + 48);
        if (strncmp(l, "retryd_sqs_errors_total{code=\"QueueDoesNotExist\"} ", 50) == 0)
            missing = atoll(l + 50);
        if (strncmp(l, "retryd_sqs_requests_total{action=\"other\"} ", 42) == 0)
            other = atoll(l + 42);
        if (strncmp(l, "retryd_sqs_errors_total{code=\"InvalidParameterValue\"} ", 54) == 0)
            invalid_series++;
    }
    e2e_response_free(&r);
    assert_true(urls >= 3);
    assert_true(other >= 1);
    assert_int_equal(invalid_series, 1);
    assert_true(missing >= 3);
}

/* ------------------------------------------------------------------------ */
/* Answers a client resets unread                                           */
/* ------------------------------------------------------------------------ */

/* The bodies of a ReceiveMessage answer's messages, space-separated ("" for
 * none). */
static const char *bodies_of(const sqs_answer_t *a)
{
    if (a->status != 200) fail_msg("ReceiveMessage: %d %s", a->status, a->body);
    rd_buf_t out = RD_BUF_INIT;
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(a->json, "Messages"))
        rd_buf_printf(&out, "%s%s", out.len ? " " : "",
                      cJSON_GetObjectItemCaseSensitive(m, "Body")->valuestring);
    const char *s = e2e_fmt("%s", out.data ? out.data : "");
    rd_buf_free(&out);
    return s;
}

static void reset_close(int fd)
{
    struct linger reset = { 1, 0 };
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
    close(fd);
}

/* A receive whose answer reached the client's socket, but which the client
 * reset unread (a close with unread bytes sends a reset, not a FIN), hands
 * its message back at once: the daemon's write had completed, and that
 * counted as delivered, so the message stayed invisible for its whole
 * VisibilityTimeout (sqs_faults_test test_vanishing_pollers failed under
 * load so). A client that read its answer keeps the lease, whether it then
 * closes or sends again and then resets. */
static void test_answer_reset_unread_is_handed_back(void **state)
{
    (void)state;
    const char *q = "e2e-sqs-unread";
    char receive[256], poll1[256];
    SET(receive, e2e_fmt("{\"QueueUrl\":\"%s\",\"WaitTimeSeconds\":0,"
                         "\"MaxNumberOfMessages\":10}", url_of(q)));
    SET(poll1, e2e_fmt("{\"QueueUrl\":\"%s\",\"WaitTimeSeconds\":1}", url_of(q)));
    sqs_answer_t a;
    json_call("CreateQueue", e2e_fmt("{\"QueueName\":\"%s\",\"Attributes\":"
                                     "{\"VisibilityTimeout\":\"600\"}}", q), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    json_call("SendMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"MessageBody\":\"u1\"}", url_of(q)), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);

    int fd = e2e_connect(g_sqs_port);
    assert_true(fd >= 0);
    json_send(fd, "ReceiveMessage", receive);
    struct pollfd in = { .fd = fd, .events = POLLIN };
    assert_int_equal(poll(&in, 1, 5000), 1);  /* the answer is in the socket */
    reset_close(fd);
    /* Handed back: a long poll gets it at once, not in 600 s. */
    json_call("ReceiveMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"WaitTimeSeconds\":5}", url_of(q)), &a);
    assert_string_equal(bodies_of(&a), "u1");
    answer_free(&a);
    /* That one was read, then closed: its lease holds. */
    json_call("ReceiveMessage", poll1, &a);
    assert_string_equal(bodies_of(&a), "");
    answer_free(&a);

    /* Read, then the client sends again on the connection, then resets. */
    json_call("SendMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"MessageBody\":\"u2\"}", url_of(q)), &a);
    answer_free(&a);
    fd = e2e_connect(g_sqs_port);
    assert_true(fd >= 0);
    json_send(fd, "ReceiveMessage", receive);
    read_answer(fd, &a);
    assert_string_equal(bodies_of(&a), "u2");
    answer_free(&a);
    json_send(fd, "ReceiveMessage", receive);
    read_answer(fd, &a);
    assert_string_equal(bodies_of(&a), "");
    answer_free(&a);
    reset_close(fd);
    json_call("ReceiveMessage", poll1, &a);
    assert_string_equal(bodies_of(&a), "");
    answer_free(&a);

    e2e_response_t r = { 0 };
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "claimed"), 3);
    assert_int_equal(e2e_jint(totals, "released"), 1);
    e2e_response_free(&r);
}

/* How many calls of the library function `fn` on queue q's base SLOWLOG
 * holds (every command is logged while slowlog-log-slower-than is 0). */
static int slowlog_calls(const char *fn, const char *q)
{
    redisReply *r = redisCommand(g_redis, "SLOWLOG GET 1000");
    assert_non_null(r);
    const char *want = e2e_fmt("%s%s", RD_FUNCTION(""), fn);
    int n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *args = r->element[i]->element[3];
        if (args->elements < 4 || strcmp(args->element[1]->str, want) != 0) continue;
        if (strstr(args->element[3]->str, q)) n++;
    }
    freeReplyObject(r);
    return n;
}

/* SendMessageBatch sends its entries in one enqueue_many call (docs/sqs.md
 * "Messages"), in order, each answered as SendMessage answers it: a
 * deduplication id repeated within the batch answers the first entry's
 * MessageId, a bad entry fails alone, the sequence numbers follow the
 * entries' order. */
static void test_send_batch_one_call_in_order(void **state)
{
    (void)state;
    sqs_answer_t a;
    const char *q = "e2e-sqs-batch.fifo";
    json_call("CreateQueue", e2e_fmt("{\"QueueName\":\"%s\",\"Attributes\":{\"FifoQueue\":"
                                     "\"true\"}}", q), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    freeReplyObject(redisCommand(g_redis, "CONFIG SET slowlog-log-slower-than 0 slowlog-max-len 10000"));
    freeReplyObject(redisCommand(g_redis, "SLOWLOG RESET"));
    json_call("SendMessageBatch", e2e_fmt(
        "{\"QueueUrl\":\"%s\",\"Entries\":["
        "{\"Id\":\"a\",\"MessageBody\":\"first\",\"MessageGroupId\":\"g\",\"MessageDeduplicationId\":\"d1\"},"
        "{\"Id\":\"b\",\"MessageBody\":\"again\",\"MessageGroupId\":\"g\",\"MessageDeduplicationId\":\"d1\"},"
        "{\"Id\":\"c\",\"MessageBody\":\"no group\"},"
        "{\"Id\":\"d\",\"MessageBody\":\"second\",\"MessageGroupId\":\"g\",\"MessageDeduplicationId\":\"d2\"},"
        "{\"Id\":\"e\",\"MessageBody\":\"by content\",\"MessageGroupId\":\"g\"}]}", url_of(q)), &a);
    int many = slowlog_calls("enqueue_many", q), single = slowlog_calls("enqueue", q);
    freeReplyObject(redisCommand(g_redis, "CONFIG SET slowlog-log-slower-than 10000 slowlog-max-len 128"));
    assert_int_equal(a.status, 200);
    assert_int_equal(many, 1);
    assert_int_equal(single, 0);
    cJSON *ok = cJSON_GetObjectItem(a.json, "Successful");
    cJSON *failed = cJSON_GetObjectItem(a.json, "Failed");
    assert_int_equal(cJSON_GetArraySize(ok), 3);
    assert_int_equal(cJSON_GetArraySize(failed), 2);
    static const char *const want_ids[] = { "a", "b", "d" };
    char ids[3][64], seqs[3][32];
    for (int i = 0; i < 3; i++) {
        cJSON *o = cJSON_GetArrayItem(ok, i);
        assert_string_equal(cJSON_GetObjectItem(o, "Id")->valuestring, want_ids[i]);
        SET(ids[i], cJSON_GetObjectItem(o, "MessageId")->valuestring);
        SET(seqs[i], cJSON_GetObjectItem(o, "SequenceNumber")->valuestring);
    }
    assert_string_equal(ids[1], ids[0]);     /* the duplicate: the original's id */
    assert_string_not_equal(ids[2], ids[0]);
    assert_true(strcmp(seqs[2], seqs[0]) > 0);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(failed, 0), "Id")->valuestring, "c");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(failed, 0), "Code")->valuestring,
                        "MissingParameter");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(failed, 1), "Id")->valuestring, "e");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(failed, 1), "Code")->valuestring,
                        "InvalidParameterValue");
    answer_free(&a);
    e2e_response_t r = { 0 };
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    assert_int_equal(e2e_jint(e2e_jget(e2e_expect_json(&r, 200), "totals"), "enqueued"), 2);
    e2e_response_free(&r);
    json_call("ReceiveMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"MaxNumberOfMessages\":10}",
                                        url_of(q)), &a);
    cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(a.json, "Messages"), 0);
    assert_string_equal(cJSON_GetObjectItem(m, "Body")->valuestring, "first");
    answer_free(&a);
}

/* SendMessage requests of one queue sent together (docs/coalescing.md
 * "Enqueues"): 16 clients at once, around a Redis that holds writes, send
 * to one FIFO queue, two of them with each MessageDeduplicationId. Each
 * answer is its own: the two of a deduplication id get one MessageId, the
 * MD5 of their own body; eight messages are made, each received once, and
 * the queue's enqueues took fewer calls than requests. */
typedef struct send_client {
    pthread_t thread;
    int index;
    const char *url;
    int status;
    char body[2048];
} send_client_t;

static void *send_main(void *arg)
{
    send_client_t *cl = arg;
    char json[512], req[1024];
    int jn = snprintf(json, sizeof json,
                      "{\"QueueUrl\":\"%s\",\"MessageBody\":\"b%d\",\"MessageGroupId\":\"g\","
                      "\"MessageDeduplicationId\":\"d%d\"}", cl->url, cl->index % 8, cl->index % 8);
    int n = snprintf(req, sizeof req,
                     "POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
                     "application/x-amz-json-1.0\r\nX-Amz-Target: AmazonSQS.SendMessage\r\n"
                     "Content-Length: %d\r\nConnection: close\r\n\r\n%s", g_sqs_port, jn, json);
    int fd = e2e_connect(g_sqs_port);
    if (fd < 0 || e2e_send_all(fd, req, (size_t)n) != 0) return NULL;
    size_t len = 0;
    for (;;) {
        ssize_t got = read(fd, cl->body + len, sizeof cl->body - 1 - len);
        if (got <= 0) break;
        len += (size_t)got;
    }
    cl->body[len] = '\0';
    close(fd);
    if (strncmp(cl->body, "HTTP/1.1 ", 9) == 0) cl->status = atoi(cl->body + 9);
    return NULL;
}

static void test_send_messages_sent_together(void **state)
{
    (void)state;
    enum { N = 16 };
    char q[64];
    e2e_queue_name(q, sizeof q, "together");
    snprintf(q + strlen(q), sizeof q - strlen(q), ".fifo");
    sqs_answer_t a;
    json_call("CreateQueue", e2e_fmt("{\"QueueName\":\"%s\",\"Attributes\":{\"FifoQueue\":\"true\"}}", q), &a);
    assert_int_equal(a.status, 200);
    answer_free(&a);
    char url[256];
    snprintf(url, sizeof url, "%s", url_of(q));
    e2e_response_t r = { 0 };
    http(&r, "GET", "/metrics", NULL);
    const char *at = strstr(r.body, "\nretryd_enqueue_calls_total ");
    assert_non_null(at);
    long long calls0 = strtoll(at + 28, NULL, 10);
    e2e_response_free(&r);

    freeReplyObject(e2e_rcmd(g_redis, "CLIENT PAUSE 400 WRITE"));
    static send_client_t clients[N];
    memset(clients, 0, sizeof clients);
    for (int c = 0; c < N; c++) {
        clients[c].index = c;
        clients[c].url = url;
        assert_int_equal(pthread_create(&clients[c].thread, NULL, send_main, &clients[c]), 0);
    }
    for (int c = 0; c < N; c++) pthread_join(clients[c].thread, NULL);
    char ids[8][64];
    memset(ids, 0, sizeof ids);
    for (int c = 0; c < N; c++) {
        if (clients[c].status != 200) fail_msg("client %d: %.300s", c, clients[c].body);
        cJSON *doc = cJSON_Parse(strstr(clients[c].body, "\r\n\r\n") + 4);
        assert_non_null(doc);
        const char *id = cJSON_GetObjectItem(doc, "MessageId")->valuestring;
        char body[8];
        snprintf(body, sizeof body, "b%d", c % 8);
        assert_string_equal(cJSON_GetObjectItem(doc, "MD5OfMessageBody")->valuestring, md5_hex(body));
        if (ids[c % 8][0] == '\0') snprintf(ids[c % 8], sizeof ids[0], "%s", id);
        else if (strcmp(ids[c % 8], id) != 0)
            fail_msg("deduplication id d%d answered %s and %s", c % 8, ids[c % 8], id);
        cJSON_Delete(doc);
    }
    http(&r, "GET", "/metrics", NULL);
    at = strstr(r.body, "\nretryd_enqueue_calls_total ");
    long long calls = strtoll(at + 28, NULL, 10) - calls0;
    e2e_response_free(&r);
    printf("# %d SendMessage requests: %lld enqueue calls\n", N, calls);
    assert_true(calls < N);

    int seen[8] = { 0 }, received = 0;
    for (int round = 0; round < 40 && received < 8; round++) {
        json_call("ReceiveMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"MaxNumberOfMessages\":10}", url), &a);
        assert_int_equal(a.status, 200);
        cJSON *msgs = cJSON_GetObjectItem(a.json, "Messages");
        for (int i = 0; i < cJSON_GetArraySize(msgs); i++) {
            cJSON *m = cJSON_GetArrayItem(msgs, i);
            const char *b = cJSON_GetObjectItem(m, "Body")->valuestring;
            assert_true(b[0] == 'b' && b[1] >= '0' && b[1] <= '7' && b[2] == '\0');
            seen[b[1] - '0']++;
            received++;
            sqs_answer_t d;
            json_call("DeleteMessage", e2e_fmt("{\"QueueUrl\":\"%s\",\"ReceiptHandle\":\"%s\"}", url,
                      cJSON_GetObjectItem(m, "ReceiptHandle")->valuestring), &d);
            assert_int_equal(d.status, 200);
            answer_free(&d);
        }
        answer_free(&a);
    }
    assert_int_equal(received, 8);
    for (int i = 0; i < 8; i++) assert_int_equal(seen[i], 1);
}

static int sqs_group_setup(void **state)
{
    (void)state;
    rd_alloc_init();
    if (e2e_suite_env(E2E_SUITE, 10, &g_bin, &g_redis_port, &g_redis) != 0) return -1;
    g_conn.fd = -1;
    snprintf(g_prefix, sizeof g_prefix, "e2esqs%ld", (long)getpid());
    g_sqs_port = e2e_free_port();
    if (g_sqs_port < 0) return -1;
    snprintf(g_sqs, sizeof g_sqs, "http://127.0.0.1:%d", g_sqs_port);
    char listen[32];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", g_sqs_port);
    return start_daemon(&g_daemon, g_redis_port, g_prefix, true, "--sqs-listen", listen, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_json_error_shapes),
        T(test_query_error_shapes),
        T(test_json_actions),
        T(test_query_actions),
        T(test_metrics_count_requests_and_errors),
        T(test_answer_reset_unread_is_handed_back),
        T(test_send_batch_one_call_in_order),
        T(test_send_messages_sent_together),
    };
    int failed = cmocka_run_group_tests_name("e2e_sqs", tests, sqs_group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
