/* test_sqs_names.c - unit tests for src/sqs/names.c: queue URLs and ARNs,
 * MessageIds, receipt handles and the ListQueues prefix cursor
 * (docs/sqs.md "Queues", "Messages"). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "retryd/buf.h"
#include "retryd/sqs/face.h"

static rd_sqs_t *endpoint(void)
{
    static rd_sqs_t s;
    memset(&s, 0, sizeof s);
    strcpy(s.account, "000000000000");
    strcpy(s.region, "eu-west-1");
    strcpy(s.origin, "http://127.0.0.1:9324");
    return &s;
}

static void test_url_and_arn_round_trip(void **state)
{
    (void)state;
    rd_sqs_t *s = endpoint();
    char url[256], arn[256];
    rd_sqs_queue_url(s, "orders", 6, url, sizeof url);
    assert_string_equal(url, "http://127.0.0.1:9324/000000000000/orders");
    rd_sqs_queue_arn(s, "orders.fifo", 11, arn, sizeof arn);
    assert_string_equal(arn, "arn:aws:sqs:eu-west-1:000000000000:orders.fifo");
    size_t len = 0;
    const char *n = rd_sqs_name_of_url(s, url, &len);
    assert_non_null(n);
    assert_int_equal(len, 6);
    assert_memory_equal(n, "orders", 6);
    /* Any host: clients reach the endpoint under many names. */
    n = rd_sqs_name_of_url(s, "https://sqs.example:443/000000000000/q-1", &len);
    assert_non_null(n);
    assert_int_equal(len, 3);
    n = rd_sqs_name_of_url(s, "/000000000000/q", &len);
    assert_non_null(n);
    assert_null(rd_sqs_name_of_url(s, "http://h/111111111111/orders", &len));  /* another account */
    assert_null(rd_sqs_name_of_url(s, "http://h/000000000000/", &len));
    assert_null(rd_sqs_name_of_url(s, "http://h/000000000000/a/b", &len));
    assert_null(rd_sqs_name_of_url(s, "http://h", &len));
    n = rd_sqs_name_of_arn(s, arn, &len);
    assert_non_null(n);
    assert_int_equal(len, 11);
    assert_null(rd_sqs_name_of_arn(s, "arn:aws:sqs:us-east-1:000000000000:orders", &len));
}

static void test_queue_names(void **state)
{
    (void)state;
    assert_true(rd_sqs_queue_name_ok("a", 1));
    assert_true(rd_sqs_queue_name_ok("Orders_2-x", 10));
    assert_true(rd_sqs_queue_name_ok("q.fifo", 6));
    assert_false(rd_sqs_queue_name_ok("", 0));
    assert_false(rd_sqs_queue_name_ok("a.b", 3));
    assert_false(rd_sqs_queue_name_ok("sp ace", 6));
    assert_false(rd_sqs_queue_name_ok(".fifo", 5));
    char long_name[82];
    memset(long_name, 'x', 81);
    assert_true(rd_sqs_queue_name_ok(long_name, 80));
    assert_false(rd_sqs_queue_name_ok(long_name, 81));
}

static void test_message_ids(void **state)
{
    (void)state;
    char a[37], b[37], c[37];
    rd_sqs_message_id("orders", 6, 1, a);
    rd_sqs_message_id("orders", 6, 1, b);
    rd_sqs_message_id("orders", 6, 2, c);
    assert_int_equal(strlen(a), 36);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
    assert_int_equal(a[8], '-');
    assert_int_equal(a[14], '4');   /* UUID-shaped: version 4 */
    assert_int_equal(a[19], '8');
    rd_sqs_message_id("other", 5, 1, c);
    assert_string_not_equal(a, c);  /* another queue, another id */
    rd_sqs_message_id("orders", 6, 9223372036854775807LL, c);
    assert_int_equal(strlen(c), 36);
    /* The layout is fixed: a message keeps its MessageId across releases
     * (FIFO deduplication answers the first send's). */
    rd_sqs_message_id("orders", 6, 0x123456789abcdefLL, c);
    assert_string_equal(c, "325e96ec-0000-4123-8000-456789abcdef");   /* FNV-1a of "orders", the id */
}

static void test_receipt_handles(void **state)
{
    (void)state;
    rd_buf_t b = RD_BUF_INIT;
    rd_sqs_handle_encode("orders", 6, 12345, "n1.77:abc", 9, &b);
    rd_buf_append(&b, "", 1);
    long long id = 0;
    char token[64];
    assert_true(rd_sqs_handle_decode(b.data, "orders", 6, &id, token, sizeof token));
    assert_int_equal(id, 12345);
    assert_string_equal(token, "n1.77:abc");
    /* Another queue's handle is invalid here: a DeleteMessage with it
     * answered success and deleted nothing. */
    assert_false(rd_sqs_handle_decode(b.data, "other", 5, &id, token, sizeof token));
    assert_false(rd_sqs_handle_decode(b.data, "orders2", 7, &id, token, sizeof token));
    /* Lengths that need padding, one and two '='. */
    for (size_t n = 1; n <= 6; n++) {
        rd_buf_reset(&b);
        rd_sqs_handle_encode("q", 1, 7, "abcdef", n, &b);
        rd_buf_append(&b, "", 1);
        assert_true(rd_sqs_handle_decode(b.data, "q", 1, &id, token, sizeof token));
        assert_int_equal(strlen(token), n);
    }
    rd_buf_free(&b);
    assert_false(rd_sqs_handle_decode("", "q", 1, &id, token, sizeof token));
    assert_false(rd_sqs_handle_decode("garbage", "q", 1, &id, token, sizeof token));
    assert_false(rd_sqs_handle_decode("bm90LWEtaGFuZGxl", "q", 1, &id, token, sizeof token)); /* "not-a-handle" */
    /* The forms without a tag, for queue "q" (tag f40c425c): */
    assert_false(rd_sqs_handle_decode("MTI6dG9r", "q", 1, &id, token, sizeof token));     /* "12:tok" */
    assert_false(rd_sqs_handle_decode("ZjQwYzQyNWM6MTI6", "q", 1, &id, token, sizeof token)); /* no token */
    assert_false(rd_sqs_handle_decode("ZjQwYzQyNWM6OnRvaw==", "q", 1, &id, token, sizeof token)); /* no id */
    assert_false(rd_sqs_handle_decode("ZjQwYzQyNWM6MTI6dAp4", "q", 1, &id, token, sizeof token)); /* a control byte */
    assert_true(rd_sqs_handle_decode("ZjQwYzQyNWM6MTI6dG9r", "q", 1, &id, token, sizeof token)); /* "f40c425c:12:tok" */
    assert_int_equal(id, 12);
    assert_false(rd_sqs_handle_decode("ZjQwYzQyNWM6MTI6YWJjZGVmZ2g=", "q", 1, &id, token, 4)); /* too long */
}

/* The cursor is below every name with the prefix and above every name
 * below all of them. */
static void test_cursor_before_prefix(void **state)
{
    (void)state;
    char cur[RD_SQS_CURSOR_MAX];
    size_t n = rd_sqs_cursor_before("orb", 3, cur);
    assert_int_equal(n, 255);
    assert_memory_equal(cur, "ora", 3);
    assert_true((unsigned char)cur[3] == 0xff && (unsigned char)cur[254] == 0xff);
    /* "ora" + 0xff... sorts before "orb", after "ora", "oraz" and "or". */
    assert_true(memcmp(cur, "orb", 3) < 0);
    assert_true(memcmp(cur, "oraz", 4) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_and_arn_round_trip),
        cmocka_unit_test(test_queue_names),
        cmocka_unit_test(test_message_ids),
        cmocka_unit_test(test_receipt_handles),
        cmocka_unit_test(test_cursor_before_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
