"""faults.py - a careless or hostile client of retryd's SQS endpoint, on raw
sockets (tests/sqs_faults_test.sh runs one CASE per retryd): what it sends no
SDK would, and every answer must still be SQS's, well-formed, in the client's
protocol, with digests that match what the client reads.

    python3 tests/sqs/faults.py SQS_URL API_URL CASE
"""
import base64
import hashlib
import json
import os
import socket
import sys
import time
import urllib.parse
import urllib.request
import xml.dom.minidom

SQS, API, CASE = sys.argv[1], sys.argv[2], sys.argv[3]
HOST, PORT = urllib.parse.urlsplit(SQS).hostname, urllib.parse.urlsplit(SQS).port
ACCOUNT = "000000000000"


def url(queue):
    return "%s/%s/%s" % (SQS, ACCOUNT, queue)


class Answer:
    def __init__(self, raw):
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1]) if lines and lines[0] else 0
        self.headers = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            self.headers[k.strip().lower()] = v.strip()

    def json(self):
        assert self.headers.get("content-type") == "application/x-amz-json-1.0", self.headers
        return json.loads(self.body)

    def xml(self):
        assert self.headers.get("content-type") == "text/xml", self.headers
        return xml.dom.minidom.parseString(self.body)

    def json_error(self):
        doc = self.json()
        code = doc["__type"].split("#")[-1]
        assert "x-amzn-query-error" in self.headers, self.headers
        return self.status, code

    def xml_error(self):
        doc = self.xml()
        return self.status, doc.getElementsByTagName("Code")[0].firstChild.data

    def __repr__(self):
        return "%d %r %r" % (self.status, self.headers, self.body[:300])


def exchange(data, timeout=10):
    s = socket.create_connection((HOST, PORT))
    s.settimeout(timeout)
    s.sendall(data)
    out = b""
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        out += b
        head, sep, body = out.partition(b"\r\n\r\n")
        if sep:
            n = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
            if n and len(body) >= int(n[0].split(b":")[1]):
                break
    s.close()
    assert out, "no answer"
    return Answer(out)


def post(body, headers):
    if isinstance(body, str):
        body = body.encode()
    head = "POST / HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %d\r\n" % (HOST, PORT, len(body))
    head += "".join("%s: %s\r\n" % kv for kv in headers.items())
    return exchange(head.encode() + b"\r\n" + body)


def form(body):
    return post(body, {"Content-Type": "application/x-www-form-urlencoded"})


def js(action, body):
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    return post(body, {"Content-Type": "application/x-amz-json-1.0",
                       "X-Amz-Target": "AmazonSQS." + action})


def post_to(endpoint, action, body):
    """A JSON-protocol request to another instance's endpoint."""
    global HOST, PORT
    saved = HOST, PORT
    HOST, PORT = urllib.parse.urlsplit(endpoint).hostname, urllib.parse.urlsplit(endpoint).port
    try:
        return js(action, body)
    finally:
        HOST, PORT = saved


def api(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(API + path, method=method, data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read() or b"null")


def wait_parked(n, secs=10):
    """Until the daemon has n long polls parked (its retryd_waiting_claims)."""
    deadline = time.time() + secs
    while True:
        with urllib.request.urlopen(API + "/metrics") as r:
            text = r.read().decode()
        have = [l for l in text.split("\n") if l.startswith("retryd_waiting_claims ")]
        if have and int(have[0].split()[1]) == n:
            return
        assert time.time() < deadline, ("parked", have, "want", n)
        time.sleep(0.02)


def alive():
    a = js("ListQueues", {})
    assert a.status == 200, a


def create(name, **attrs):
    a = js("CreateQueue", {"QueueName": name, "Attributes": attrs})
    assert a.status == 200, a
    return url(name)


# ---------------------------------------------------------------- cases

def case_json_shapes():
    """A member of the wrong type: SerializationException, and the daemon
    lives (CreateQueue's Attributes as a list crashed it)."""
    q = create("shapes")
    bad = [
        ("CreateQueue", {"QueueName": "shapes2", "Attributes": [1]}),
        ("CreateQueue", {"QueueName": "shapes2", "Attributes": {"DelaySeconds": {}}}),
        ("SetQueueAttributes", {"QueueUrl": q, "Attributes": ["VisibilityTimeout"]}),
        ("GetQueueAttributes", {"QueueUrl": q, "AttributeNames": "All"}),
        ("TagQueue", {"QueueUrl": q, "Tags": [["k", "v"]]}),
        ("UntagQueue", {"QueueUrl": q, "TagKeys": [1]}),
        ("SendMessage", {"QueueUrl": q, "MessageBody": 5}),
        ("SendMessage", {"QueueUrl": q, "MessageBody": "b", "MessageAttributes": {"a": 1}}),
        ("SendMessageBatch", {"QueueUrl": q, "Entries": [1]}),
        ("DeleteMessageBatch", {"QueueUrl": q, "Entries": [{"Id": 1, "ReceiptHandle": "x"}]}),
        ("ReceiveMessage", {"QueueUrl": q, "MessageAttributeNames": [None]}),
    ]
    for action, body in bad:
        a = js(action, body)
        assert a.json_error() == (400, "SerializationException"), (action, body, a)
    alive()
    # Nothing was made of them.
    assert js("GetQueueUrl", {"QueueName": "shapes2"}).json_error()[1] == "QueueDoesNotExist"


def case_oversize_bodies():
    """A body over the endpoint's 1 MiB read limit is not read, and still
    gets SQS's error in the client's protocol (it was problem+json)."""
    q = create("big")
    big = "a" * (1024 * 1024 + 1)
    a = js("SendMessage", {"QueueUrl": q, "MessageBody": big})
    assert a.json_error() == (400, "InvalidParameterValue"), a
    a = js("SendMessageBatch", {"QueueUrl": q, "Entries": [
        {"Id": str(i), "MessageBody": "a" * 262144} for i in range(10)]})
    assert a.json_error() == (400, "BatchRequestTooLong"), a
    a = js("ListQueues", {"QueueNamePrefix": big})
    assert a.json_error() == (413, "RequestEntityTooLarge"), a
    a = form("Action=SendMessage&QueueUrl=%s&MessageBody=%s" % (q, big))
    assert a.xml_error() == (413, "RequestEntityTooLarge"), a
    # At the limits that count: 256 KiB of body sends, one byte more does
    # not, in both protocols; a 256 KiB body of 4-byte characters escaped
    # as JSON's \\u pairs (768 KiB on the wire) fits.
    k = 262144
    assert js("SendMessage", {"QueueUrl": q, "MessageBody": "a" * k}).status == 200
    assert js("SendMessage", {"QueueUrl": q, "MessageBody": "a" * (k + 1)}).json_error() == \
        (400, "InvalidParameterValue")
    assert form("Action=SendMessage&QueueUrl=%s&MessageBody=%s" % (q, "a" * k)).status == 200
    assert form("Action=SendMessage&QueueUrl=%s&MessageBody=%s" % (q, "a" * (k + 1))).xml_error() == \
        (400, "InvalidParameterValue")
    emoji = "\U0001F600" * (k // 4)
    a = js("SendMessage", {"QueueUrl": q, "MessageBody": emoji})
    assert a.status == 200 and a.json()["MD5OfMessageBody"] == hashlib.md5(emoji.encode()).hexdigest(), a
    a = js("SendMessageBatch", {"QueueUrl": q, "Entries": [
        {"Id": str(i), "MessageBody": "a" * (k // 10)} for i in range(10)]})
    assert a.status == 200 and len(a.json()["Successful"]) == 10, a
    a = js("SendMessageBatch", {"QueueUrl": q, "Entries": [
        {"Id": str(i), "MessageBody": "a" * (k // 10 + 1)} for i in range(10)]})
    assert a.json_error() == (400, "BatchRequestTooLong"), a
    alive()


def case_http_payloads():
    """A message the HTTP API enqueued with what SQS refuses (control
    characters, U+FFFF): each protocol carries what it can, and MD5OfBody
    is the digest of the body the client reads (the XML answer's was of
    the stored bytes, so boto3 refused it)."""
    payload = "p\u0001\uffff\u0085z\U0001F600"
    for _ in range(2):
        api("POST", "/queues/ctl/messages", {"payload": payload})
    a = js("ReceiveMessage", {"QueueUrl": url("ctl")})
    m = a.json()["Messages"][0]
    assert m["Body"] == payload, m
    assert m["MD5OfBody"] == hashlib.md5(payload.encode()).hexdigest(), m
    a = form("Action=ReceiveMessage&QueueUrl=" + url("ctl"))
    doc = a.xml()
    body = doc.getElementsByTagName("Body")[0].firstChild.data
    md5 = doc.getElementsByTagName("MD5OfBody")[0].firstChild.data
    assert body == "p\ufffd\ufffd\u0085z\U0001F600", repr(body)
    assert md5 == hashlib.md5(body.encode()).hexdigest(), (md5, body)


def case_foreign_handles():
    """A receipt handle of another queue is ReceiptHandleIsInvalid there (a
    DeleteMessage with it answered success and deleted nothing); forged and
    stale handles never delete what they do not name."""
    q1, q2 = create("hq1"), create("hq2")
    for q in (q1, q2):
        assert js("SendMessage", {"QueueUrl": q, "MessageBody": "m"}).status == 200
    m1 = js("ReceiveMessage", {"QueueUrl": q1, "VisibilityTimeout": 60}).json()["Messages"][0]
    m2 = js("ReceiveMessage", {"QueueUrl": q2, "VisibilityTimeout": 60}).json()["Messages"][0]
    h1 = m1["ReceiptHandle"]
    assert js("DeleteMessage", {"QueueUrl": q2, "ReceiptHandle": h1}).json_error() == \
        (404, "ReceiptHandleIsInvalid")
    assert form("Action=DeleteMessage&QueueUrl=%s&ReceiptHandle=%s" % (
        q2, urllib.parse.quote(h1, safe=""))).xml_error() == (404, "ReceiptHandleIsInvalid")
    assert js("ChangeMessageVisibility", {"QueueUrl": q2, "ReceiptHandle": h1,
                                          "VisibilityTimeout": 0}).json_error() == \
        (404, "ReceiptHandleIsInvalid")
    a = js("DeleteMessageBatch", {"QueueUrl": q2, "Entries": [
        {"Id": "a", "ReceiptHandle": h1}, {"Id": "b", "ReceiptHandle": m2["ReceiptHandle"]}]}).json()
    assert [e["Id"] for e in a["Successful"]] == ["b"], a
    assert [(e["Id"], e["Code"]) for e in a["Failed"]] == [("a", "ReceiptHandleIsInvalid")], a
    # Forged: ids and tokens that name nothing, in handles of the right form.
    tag = m1["MessageId"].split("-")[0]
    for raw in [tag + ":1:nope", tag + ":99999999:x", tag + ":9223372036854775807:x",
                tag + ":" + m1["MessageId"] + ":x"]:
        h = base64.b64encode(raw.encode()).decode()
        a = js("DeleteMessage", {"QueueUrl": q1, "ReceiptHandle": h})
        assert a.status in (200, 404), a
    # q1's message is still in flight, and its own handle deletes it.
    st = api("GET", "/queues/hq1/stats")["counts"]
    assert st["processing"] == 1 and st["succeeded"] == 0, st
    assert js("DeleteMessage", {"QueueUrl": q1, "ReceiptHandle": h1}).status == 200
    assert api("GET", "/queues/hq1/stats")["counts"]["succeeded"] == 1
    # A deleted message's handle succeeds again (SQS's rule), deleting nothing.
    assert js("DeleteMessage", {"QueueUrl": q1, "ReceiptHandle": h1}).status == 200
    assert api("GET", "/queues/hq1/stats")["counts"]["succeeded"] == 1


def case_delete_recreate():
    """DeleteQueue, then CreateQueue of the same name at once, on this
    instance and across two (SQS2): the new queue is registered, so
    GetQueueUrl and ListQueues find it (the registry cache of the instance
    that had registered it skipped the registration for 10 s)."""
    other = os.environ.get("SQS2", SQS)
    for name in ("dr1", "dr2"):
        create(name)
        assert js("SendMessage", {"QueueUrl": url(name), "MessageBody": "m"}).status == 200
        a = post_to(other, "DeleteQueue", {"QueueUrl": url(name)})
        assert a.status == 200, a
        assert js("GetQueueUrl", {"QueueName": name}).json_error()[1] == "QueueDoesNotExist"
        create(name)
        for where in (SQS, other):
            a = post_to(where, "GetQueueUrl", {"QueueName": name})
            assert a.status == 200 and a.json()["QueueUrl"].endswith("/" + name), (where, a)
            urls = post_to(where, "ListQueues", {"QueueNamePrefix": name}).json().get("QueueUrls", [])
            assert [u.rsplit("/", 1)[1] for u in urls] == [name], (where, urls)
        # Its messages are served as any queue's: a delay is promoted by the
        # timer, which ticks only registered queues.
        assert js("SendMessage", {"QueueUrl": url(name), "MessageBody": "later",
                                  "DelaySeconds": 1}).status == 200
        a = js("ReceiveMessage", {"QueueUrl": url(name), "WaitTimeSeconds": 5})
        assert [m["Body"] for m in a.json().get("Messages", [])] == ["later"], a


def case_fifo_dedup():
    """A FIFO send without MessageDeduplicationId on a queue without
    ContentBasedDeduplication is InvalidParameterValue, as in SQS: retryd
    deduplicated it by the body, so a second send of the same body answered
    the first's MessageId and was never delivered."""
    q = create("nodedup.fifo", FifoQueue="true")
    for _ in range(2):
        a = js("SendMessage", {"QueueUrl": q, "MessageBody": "same", "MessageGroupId": "g"})
        assert a.json_error() == (400, "InvalidParameterValue"), a
    a = form("Action=SendMessage&QueueUrl=%s&MessageBody=same&MessageGroupId=g" % q)
    assert a.xml_error() == (400, "InvalidParameterValue"), a
    a = js("SendMessageBatch", {"QueueUrl": q, "Entries": [
        {"Id": "a", "MessageBody": "same", "MessageGroupId": "g"},
        {"Id": "b", "MessageBody": "same", "MessageGroupId": "g", "MessageDeduplicationId": "d1"}]})
    doc = a.json()
    assert [e["Id"] for e in doc["Successful"]] == ["b"], doc
    assert [(e["Id"], e["Code"]) for e in doc["Failed"]] == [("a", "InvalidParameterValue")], doc
    assert api("GET", "/queues/nodedup.fifo/stats")["counts"]["pending"] == 1
    # With it, the body is the key: one message for two sends.
    q2 = create("dedup.fifo", FifoQueue="true", ContentBasedDeduplication="true")
    ids = [js("SendMessage", {"QueueUrl": q2, "MessageBody": "same", "MessageGroupId": "g"}).json()
           ["MessageId"] for _ in range(2)]
    assert ids[0] == ids[1], ids
    assert api("GET", "/queues/dedup.fifo/stats")["counts"]["pending"] == 1


def receive_request(queue, wait, count=10):
    body = json.dumps({"QueueUrl": url(queue), "WaitTimeSeconds": wait,
                       "MaxNumberOfMessages": count}).encode()
    return (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
            b"X-Amz-Target: AmazonSQS.ReceiveMessage\r\nContent-Length: %d\r\n\r\n" % len(body)) + body


def case_vanishing_pollers():
    """Long polls (WaitTimeSeconds 20) whose clients vanish, by reset or by
    close, before and while messages arrive: no message is lost; a reset
    client's claims are handed back at once (include/retryd/handback.h), so a
    live receiver gets every one at once. A close is an EOF, which HTTP/1.1
    cannot tell from a half-close: a claim the daemon answered before it read
    the EOF is owed that answer, and if the client had gone the message comes
    back when its visibility runs out, as with SQS (so that queue has 2 s)."""
    for how, queue, visibility in (("reset", "vanish", "600"), ("close", "vanishc", "2")):
        create(queue, VisibilityTimeout=visibility)
        socks = []
        for _ in range(3):
            s = socket.create_connection((HOST, PORT))
            s.sendall(receive_request(queue, 20))
            socks.append(s)
        wait_parked(3)    # parked: nothing is there yet
        for s in socks:
            if how == "reset":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            s.close()
        for i in range(5):
            assert js("SendMessage", {"QueueUrl": url(queue), "MessageBody": "%s%d" % (how, i)}).status == 200
        # Receivers that vanish while messages are there: a claim answered to
        # nobody is handed back (include/retryd/handback.h).
        for _ in range(3):
            s = socket.create_connection((HOST, PORT))
            s.sendall(receive_request(queue, 0))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            s.close()
        got, deadline = [], time.time() + 10
        while len(got) < 5 and time.time() < deadline:
            a = js("ReceiveMessage", {"QueueUrl": url(queue), "MaxNumberOfMessages": 10,
                                      "WaitTimeSeconds": 1})
            for m in a.json().get("Messages", []):
                got.append(m["Body"])
                js("DeleteMessage", {"QueueUrl": url(queue), "ReceiptHandle": m["ReceiptHandle"]})
        assert sorted(got) == ["%s%d" % (how, i) for i in range(5)], (how, got)
        counts = api("GET", "/queues/%s/stats" % queue)["counts"]
        assert counts["processing"] == 0 and counts["pending"] == 0 and counts["succeeded"] == 5, counts


def case_half_close():
    """A client that sends its request and shuts its sending side still gets
    the whole answer (HTTP/1.1 allows it)."""
    create("halfclose")
    js("SendMessage", {"QueueUrl": url("halfclose"), "MessageBody": "hc"})
    s = socket.create_connection((HOST, PORT))
    s.settimeout(10)
    s.sendall(receive_request("halfclose", 5))
    s.shutdown(socket.SHUT_WR)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    s.close()
    a = Answer(out)
    assert a.status == 200 and [m["Body"] for m in a.json()["Messages"]] == ["hc"], a


def case_list_10000():
    """ListQueues over 10,000 queues (and names SQS does not allow between
    them, made on the HTTP API): every page size walks each SQS queue once,
    in name order; without MaxResults at most 1000 and no NextToken."""
    import http.client
    c = http.client.HTTPConnection(HOST, PORT)
    for i in range(10000):
        c.request("POST", "/", json.dumps({"QueueName": "lq-%05d" % i}),
                  {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.CreateQueue"})
        r = c.getresponse()
        r.read()
        assert r.status == 200, r.status
    for i in range(0, 10000, 37):
        api("POST", "/queues/lq-%05d%%20x/messages" % i, {"payload": "p"})
    want = ["lq-%05d" % i for i in range(10000)]
    for page in (1000, 7):
        seen, token = [], None
        while True:
            body = {"QueueNamePrefix": "lq-", "MaxResults": page}
            if token:
                body["NextToken"] = token
            c.request("POST", "/", json.dumps(body), {"Content-Type": "application/x-amz-json-1.0",
                                                      "X-Amz-Target": "AmazonSQS.ListQueues"})
            r = c.getresponse()
            doc = json.loads(r.read())
            urls = doc.get("QueueUrls", [])
            assert len(urls) <= page, len(urls)
            seen += [u.rsplit("/", 1)[1] for u in urls]
            token = doc.get("NextToken")
            if not token:
                break
        assert seen == want, (page, len(seen), seen[:3])
    doc = js("ListQueues", {"QueueNamePrefix": "lq-"}).json()
    assert len(doc["QueueUrls"]) <= 1000 and "NextToken" not in doc, len(doc["QueueUrls"])
    # A name SQS does not allow is no SQS queue.
    assert js("GetQueueUrl", {"QueueName": "lq-00000 x"}).json_error()[1] == "QueueDoesNotExist"


def case_wake_across_instances():
    """A long poll on one instance (SQS2) wakes at a send on the other."""
    import threading
    other = os.environ["SQS2"]
    create("wake")
    out = {}

    def poll():
        t = time.time()
        out["a"] = post_to(other, "ReceiveMessage", {"QueueUrl": url("wake"), "WaitTimeSeconds": 20})
        out["t"] = time.time() - t
    th = threading.Thread(target=poll)
    th.start()
    time.sleep(0.5)
    js("SendMessage", {"QueueUrl": url("wake"), "MessageBody": "ping"})
    th.join()
    assert [m["Body"] for m in out["a"].json()["Messages"]] == ["ping"], out
    assert out["t"] < 5, out["t"]


def case_sigterm_mid_poll():
    """SIGTERM (to RETRYD_PID) while a long poll waits and a body is half
    sent: the poll is answered (empty) at once and the daemon exits; a
    message sent before is not lost."""
    import signal
    import threading
    create("term")
    out = {}

    def poll():
        t = time.time()
        s = socket.create_connection((HOST, PORT))
        s.settimeout(15)
        s.sendall(receive_request("term", 20))
        data = b""
        while True:
            try:
                b = s.recv(65536)
            except OSError:
                break
            if not b:
                break
            data += b
        out["raw"], out["t"] = data, time.time() - t
    th = threading.Thread(target=poll)
    th.start()
    half = socket.create_connection((HOST, PORT))
    half.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
                 b"X-Amz-Target: AmazonSQS.ListQueues\r\nContent-Length: 10\r\n\r\n{")
    time.sleep(0.5)
    os.kill(int(os.environ["RETRYD_PID"]), signal.SIGTERM)
    th.join()
    a = Answer(out["raw"])
    assert a.status == 200 and "Messages" not in a.json(), a
    assert out["t"] < 5, out["t"]


def case_sqs_rules():
    """Rules SQS enforces that retryd took silently: a message system
    attribute other than AWSTraceHeader, and a dead-letter queue of the
    other type (a FIFO queue's must be FIFO, a standard one's standard)."""
    q = create("rules")
    a = js("SendMessage", {"QueueUrl": q, "MessageBody": "x", "MessageSystemAttributes": {
        "Foo": {"DataType": "String", "StringValue": "v"}}})
    assert a.json_error() == (400, "InvalidParameterValue"), a
    a = js("SendMessage", {"QueueUrl": q, "MessageBody": "x", "MessageSystemAttributes": {
        "AWSTraceHeader": {"DataType": "Number", "StringValue": "1"}}})
    assert a.json_error() == (400, "InvalidParameterValue"), a
    a = js("SendMessage", {"QueueUrl": q, "MessageBody": "x", "MessageSystemAttributes": {
        "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}}})
    assert a.status == 200, a
    a = form("Action=SendMessage&QueueUrl=%s&MessageBody=x&MessageSystemAttribute.1.Name=Foo&"
             "MessageSystemAttribute.1.Value.DataType=String&MessageSystemAttribute.1.Value.StringValue=v" % q)
    assert a.xml_error() == (400, "InvalidParameterValue"), a
    create("rules-dlq.fifo", FifoQueue="true")
    create("rules-std-dlq")
    arn = "arn:aws:sqs:us-east-1:000000000000:"
    a = js("SetQueueAttributes", {"QueueUrl": q, "Attributes": {"RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": arn + "rules-dlq.fifo", "maxReceiveCount": "2"})}})
    assert a.json_error() == (400, "InvalidParameterValue"), a
    a = js("CreateQueue", {"QueueName": "rules2.fifo", "Attributes": {"FifoQueue": "true", "RedrivePolicy":
        json.dumps({"deadLetterTargetArn": arn + "rules-std-dlq", "maxReceiveCount": "2"})}})
    assert a.json_error() == (400, "InvalidParameterValue"), a
    a = js("CreateQueue", {"QueueName": "rules3.fifo", "Attributes": {"FifoQueue": "true", "RedrivePolicy":
        json.dumps({"deadLetterTargetArn": arn + "rules-dlq.fifo", "maxReceiveCount": "2"})}})
    assert a.status == 200, a
    # The policy's JSON is read as strictly as a request body: trailing bytes,
    # a leading zero and a raw control byte in a string are refused (cJSON
    # alone took all three, the first two as maxReceiveCount 5).
    good = json.dumps({"deadLetterTargetArn": arn + "rules-std-dlq", "maxReceiveCount": 5})
    for bad in (good + "garbage", good.replace(": 5", ": 05"),
                good.replace("rules-std-dlq", "rules-std-dlq\x01")):
        a = js("SetQueueAttributes", {"QueueUrl": q, "Attributes": {"RedrivePolicy": bad}})
        assert a.json_error() == (400, "InvalidParameterValue"), (bad, a)
    assert js("SetQueueAttributes", {"QueueUrl": q, "Attributes": {"RedrivePolicy": good}}).status == 200


def main():
    fn = globals().get("case_" + CASE)
    if fn is None:
        sys.exit("unknown case " + CASE)
    fn()


main()
