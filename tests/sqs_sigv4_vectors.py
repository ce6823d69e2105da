#!/usr/bin/python3
"""sqs_sigv4_vectors.py - SQS requests signed by botocore, as a C header for
tests/test_sqs_sigv4.c (src/sqs/sigv4.c checks them).

Run with Debian's python3 (python3-botocore, python3-boto3):

    /usr/bin/python3 tests/sqs_sigv4_vectors.py > tests/sqs_sigv4_vectors.h

Every request is signed at SIGNED_AT (fixed, so the output is the same on
every run) with KEY_ID / SECRET, for host HOST. The query-protocol requests
come from a real boto3 SQS client (captured before they are sent, no
network); the others from botocore.auth.SigV4Auth / SigV4QueryAuth (and
S3SigV4QueryAuth, for UNSIGNED-PAYLOAD) on a hand made AWSRequest: the JSON
protocol, presigned GETs, a path that needs encoding, repeated query names,
the Date header, x-amz-content-sha256. The presigned vectors come first
after the client ones, with X-Amz-Expires 300 and 3600.
"""
import calendar
import datetime
import json
import sys

import boto3
import botocore
import botocore.auth
from botocore.auth import S3SigV4QueryAuth, SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

KEY_ID = "AKIDRETRYDTEST"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
REGION = "eu-west-3"
HOST = "localhost:9324"
SIGNED_AT = datetime.datetime(2026, 2, 3, 4, 5, 6)
QUEUE_URL = f"http://{HOST}/000000000000/orders"


class FixedDateTime(datetime.datetime):
    @classmethod
    def utcnow(cls):
        return SIGNED_AT


# botocore.auth reads the clock through datetime.datetime.utcnow().
botocore.auth.datetime.datetime = FixedDateTime


class Captured(Exception):
    def __init__(self, request):
        super().__init__("captured")
        self.request = request


def capture(request, **_):
    raise Captured(request)


def client_request(op, **params):
    session = boto3.session.Session(aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
                                    region_name=REGION)
    client = session.client("sqs", endpoint_url=f"http://{HOST}")
    client.meta.events.register("before-send.sqs.*", capture)
    try:
        getattr(client, op)(**params)
    except Captured as c:
        r = c.request
        return r.method, r.url, list(r.headers.items()), r.body or b""
    raise RuntimeError("the request was not captured")


def signed(method, url, headers, body, query_auth=None, expires=300):
    creds = Credentials(KEY_ID, SECRET)
    req = AWSRequest(method=method, url=url, headers=headers, data=body)
    if query_auth is not None:
        query_auth(creds, "sqs", REGION, expires=expires).add_auth(req)
    else:
        SigV4Auth(creds, "sqs", REGION).add_auth(req)
    return req.method, req.url, list(req.headers.items()), req.body or b""


def as_bytes(v):
    return v if isinstance(v, bytes) else str(v).encode("utf-8")


def c_string(b):
    out = []
    for byte in b:
        ch = chr(byte)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append("\\%03o" % byte)
    return '"' + "".join(out) + '"'


def vector(name, method, url, headers, body):
    path_query = url.split(HOST, 1)[1]
    path, _, query = path_query.partition("?")
    # What http.c hands a handler: names lower-cased, values trimmed, and a
    # Host line (the one the client's HTTP library adds) when botocore did
    # not put one in the headers itself.
    lines = [(as_bytes(k).lower(), as_bytes(v).strip(b" \t")) for k, v in headers]
    if all(k != b"host" for k, _ in lines):
        lines.insert(0, (b"host", HOST.encode()))
    packed = b"".join(k + b"\0" + v + b"\0" for k, v in lines)
    body = as_bytes(body)
    return {"name": name, "method": method, "path": path.encode(),
            "query": query.encode() if "?" in path_query else None,
            "headers": packed, "count": len(lines), "body": body}


def build():
    v = []
    v.append(vector("query SendMessage, unicode and spaces", *client_request(
        "send_message", QueueUrl=QUEUE_URL,
        MessageBody="h\u00e9llo  w\u00f6rld \u2713 a+b=c&d ~ 100%",
        MessageAttributes={"colour": {"DataType": "String", "StringValue": "bl\u00fc e"}})))
    v.append(vector("query SendMessageBatch", *client_request(
        "send_message_batch", QueueUrl=QUEUE_URL,
        Entries=[{"Id": "a", "MessageBody": "one"}, {"Id": "b", "MessageBody": "two",
                                                        "DelaySeconds": 5}])))
    v.append(vector("query ReceiveMessage", *client_request(
        "receive_message", QueueUrl=QUEUE_URL, MaxNumberOfMessages=10, WaitTimeSeconds=2,
        AttributeNames=["All"])))
    body = json.dumps({"QueueUrl": QUEUE_URL, "MessageBody": "caf\u00e9 \u2615",
                       "DelaySeconds": 3}, ensure_ascii=False).encode("utf-8")
    v.append(vector("json SendMessage with X-Amz-Target", *signed(
        "POST", f"http://{HOST}/", {"Content-Type": "application/x-amz-json-1.0",
                                   "X-Amz-Target": "AmazonSQS.SendMessage"}, body)))
    v.append(vector("presigned GET ReceiveMessage", *signed(
        "GET", f"http://{HOST}/000000000000/orders?Action=ReceiveMessage&MaxNumberOfMessages=5"
               f"&Note=two%20words%20%E2%9C%93", {}, b"", query_auth=SigV4QueryAuth, expires=300)))
    # S3-style presigners sign UNSIGNED-PAYLOAD instead of the empty body's hash.
    v.append(vector("presigned GET, UNSIGNED-PAYLOAD", *signed(
        "GET", f"http://{HOST}/000000000000/orders?Action=GetQueueUrl&QueueName=orders", {}, b"",
        query_auth=S3SigV4QueryAuth, expires=3600)))
    v.append(vector("repeated query names", *signed(
        "GET", f"http://{HOST}/000000000000/orders?Tag=zeta&Tag=alpha&Action=ListQueueTags"
               f"&Tag=Alpha&Empty=", {}, b"")))
    v.append(vector("path that needs encoding", *signed(
        "POST", f"http://{HOST}/000000000000/my%20queue/./x/../",
        {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        b"Action=GetQueueAttributes&AttributeName.1=All")))
    v.append(vector("Date header instead of X-Amz-Date", *signed(
        "POST", f"http://{HOST}/", {"Date": "placeholder", "Content-Type":
                                   "application/x-www-form-urlencoded"},
        b"Action=ListQueues")))
    v.append(vector("x-amz-content-sha256 and inner spaces", *signed(
        "POST", f"http://{HOST}/", {"Content-Type": "application/x-amz-json-1.0",
                                   "X-Amz-Target": "AmazonSQS.ListQueues",
                                   "X-Custom": "a   b \t c",
                                   "X-Amz-Content-SHA256": botocore.auth.sha256(
                                       b"{}").hexdigest()}, b"{}")))
    return v


def main():
    vectors = build()
    signed_at = calendar.timegm(SIGNED_AT.timetuple())
    w = sys.stdout.write
    w("/* sqs_sigv4_vectors.h - GENERATED by tests/sqs_sigv4_vectors.py with botocore %s;\n"
      " * do not edit. SQS requests as http.c hands them over (header names\n"
      " * lower-cased, \"name\\0value\\0\" pairs), each signed by botocore at\n"
      " * SIGV4_SIGNED_AT with SIGV4_KEY_ID / SIGV4_SECRET. */\n" % botocore.__version__)
    w("#ifndef SQS_SIGV4_VECTORS_H\n#define SQS_SIGV4_VECTORS_H\n\n#include <stddef.h>\n\n")
    w('#include "retryd/http.h"\n\n')
    w("#define SIGV4_KEY_ID %s\n#define SIGV4_SECRET %s\n#define SIGV4_REGION %s\n"
      % (c_string(KEY_ID.encode()), c_string(SECRET.encode()), c_string(REGION.encode())))
    w("#define SIGV4_SIGNED_AT %dLL\n\n" % signed_at)
    w("typedef struct sigv4_vector {\n    const char *name;\n    rd_http_method_t method;\n"
      "    const char *path;\n    const char *query;\n    const char *headers;\n"
      "    size_t headers_len;\n    size_t header_count;\n    const char *body;\n"
      "    size_t body_len;\n} sigv4_vector_t;\n\n")
    w("static const sigv4_vector_t sigv4_vectors[] = {\n")
    for v in vectors:
        w("    { %s, RD_HTTP_%s, %s, %s,\n      %s,\n      %d, %d,\n      %s, %d },\n" % (
            c_string(v["name"].encode()), v["method"], c_string(v["path"]),
            "NULL" if v["query"] is None else c_string(v["query"]),
            c_string(v["headers"]), len(v["headers"]), v["count"], c_string(v["body"]),
            len(v["body"])))
    w("};\n\n#endif\n")


if __name__ == "__main__":
    main()
