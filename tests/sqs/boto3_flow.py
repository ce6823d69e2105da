#!/usr/bin/python3
"""boto3_flow.py ENDPOINT CASE - Debian's python3-boto3 (1.26, the SQS query
protocol) driving retryd's SQS endpoint as its users write it: no patching,
the client's own calls. Each CASE is one scenario; it exits non-zero with a
message on the first thing that is not as SQS documents it.

The MD5s are checked here too (botocore does not verify them itself):
MD5OfBody against hashlib, MD5OfMessageAttributes with the algorithm the
AWS SDKs use to verify it (an independent implementation of it)."""
import hashlib
import json
import struct
import sys
import time
import uuid

import boto3
import botocore.exceptions

endpoint, case = sys.argv[1], sys.argv[2]
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id=sys.argv[3] if len(sys.argv) > 3 else "test",
                   aws_secret_access_key=sys.argv[4] if len(sys.argv) > 4 else "test")
run = uuid.uuid4().hex[:8]


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def md5_of_attributes(attrs):
    """The AWS SDKs' MD5OfMessageAttributes: names sorted, each as
    length-prefixed name, type, a transport byte and the value."""
    buf = b""
    for name in sorted(attrs):
        a = attrs[name]
        enc = name.encode()
        buf += struct.pack(">I", len(enc)) + enc
        t = a["DataType"].encode()
        buf += struct.pack(">I", len(t)) + t
        if "BinaryValue" in a:
            v = a["BinaryValue"]
            buf += b"\x02" + struct.pack(">I", len(v)) + v
        else:
            v = a["StringValue"].encode()
            buf += b"\x01" + struct.pack(">I", len(v)) + v
    return hashlib.md5(buf).hexdigest()


def error_code(fn, **kw):
    try:
        fn(**kw)
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    return None, 200


def case_basic():
    url = sqs.create_queue(QueueName=f"boto-{run}")["QueueUrl"]
    check(url.endswith(f"/000000000000/boto-{run}"), f"queue url {url}")
    check(sqs.get_queue_url(QueueName=f"boto-{run}")["QueueUrl"] == url, "GetQueueUrl")
    attrs = {"trace": {"DataType": "String", "StringValue": "abc \u00e9\u4e2d"},
             "n": {"DataType": "Number", "StringValue": "-12.5"},
             "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff bin"},
             "custom": {"DataType": "String.json", "StringValue": "{\"a\": 1}"}}
    body = "hello <&> \u00e9\u4e2d\U0001F600 \"quoted\"\n\ttab"
    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attrs)
    check(sent["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest(), "MD5OfMessageBody")
    check(sent["MD5OfMessageAttributes"] == md5_of_attributes(attrs),
          f"MD5OfMessageAttributes {sent.get('MD5OfMessageAttributes')} != {md5_of_attributes(attrs)}")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"],
                              MessageAttributeNames=["All"], WaitTimeSeconds=1)
    msgs = got.get("Messages", [])
    check(len(msgs) == 1, f"one message received, got {len(msgs)}")
    m = msgs[0]
    check(m["Body"] == body, f"body {m['Body']!r}")
    check(m["MessageId"] == sent["MessageId"], "MessageId of send and receive")
    check(m["MD5OfBody"] == hashlib.md5(body.encode()).hexdigest(), "MD5OfBody")
    check(m["MessageAttributes"] == attrs, f"attributes {m['MessageAttributes']}")
    check(m["MD5OfMessageAttributes"] == md5_of_attributes(attrs), "received MD5OfMessageAttributes")
    check(m["Attributes"]["ApproximateReceiveCount"] == "1", "ApproximateReceiveCount 1")
    sent_ts = int(m["Attributes"]["SentTimestamp"])
    check(abs(sent_ts - time.time() * 1000) < 60000, f"SentTimestamp {sent_ts}")
    check("ApproximateFirstReceiveTimestamp" in m["Attributes"], "ApproximateFirstReceiveTimestamp")
    # Only some attributes: the MD5 covers the ones returned.
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    again = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["tr*", "n"],
                                AttributeNames=["ApproximateReceiveCount"], WaitTimeSeconds=2)
    m2 = again["Messages"][0]
    check(set(m2.get("MessageAttributes", {})) == {"n"}, f"selected attributes {m2.get('MessageAttributes')}")
    check(m2["MD5OfMessageAttributes"] == md5_of_attributes({"n": attrs["n"]}), "MD5 of the selection")
    check(m2["Attributes"]["ApproximateReceiveCount"] == "2", "a released receive counts")
    # The first receipt handle is outdated: its delete succeeds and deletes nothing.
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    n = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    check(n["ApproximateNumberOfMessagesNotVisible"] == "1", f"still in flight: {n}")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m2["ReceiptHandle"])
    n = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    check(n["ApproximateNumberOfMessagesNotVisible"] == "0" and n["ApproximateNumberOfMessages"] == "0",
          f"deleted: {n}")
    check(n["QueueArn"] == f"arn:aws:sqs:us-east-1:000000000000:boto-{run}", n["QueueArn"])
    check(n["VisibilityTimeout"] == "30" and n["MessageRetentionPeriod"] == "345600", f"defaults {n}")


def case_batches():
    url = sqs.create_queue(QueueName=f"batch-{run}", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    entries = [{"Id": f"e{i}", "MessageBody": f"body {i}"} for i in range(10)]
    res = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    check(len(res.get("Successful", [])) == 10 and not res.get("Failed"), f"send batch {res}")
    for s in res["Successful"]:
        i = int(s["Id"][1:])
        check(s["MD5OfMessageBody"] == hashlib.md5(f"body {i}".encode()).hexdigest(), "batch MD5")
    got = []
    while len(got) < 10:
        r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        check(r.get("Messages"), f"receive {len(got)} of 10")
        got += r["Messages"]
    check(sorted(m["Body"] for m in got) == sorted(f"body {i}" for i in range(10)), "bodies")
    bad = [{"Id": "ok", "ReceiptHandle": got[0]["ReceiptHandle"]},
           {"Id": "bad", "ReceiptHandle": "not-a-handle"}]
    r = sqs.delete_message_batch(QueueUrl=url, Entries=bad)
    check([s["Id"] for s in r.get("Successful", [])] == ["ok"], f"delete batch {r}")
    check([f["Code"] for f in r.get("Failed", [])] == ["ReceiptHandleIsInvalid"], f"failed {r}")
    r = sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": f"v{i}", "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 120}
                               for i, m in enumerate(got[1:])])
    check(len(r.get("Successful", [])) == 9, f"visibility batch {r}")
    r = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]}
                                                        for i, m in enumerate(got[1:])])
    check(len(r.get("Successful", [])) == 9, f"delete batch {r}")
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                               "ApproximateNumberOfMessagesNotVisible"])
    check(a["Attributes"] == {"ApproximateNumberOfMessages": "0",
                              "ApproximateNumberOfMessagesNotVisible": "0"}, f"{a}")
    # Refusals of a whole batch.
    code, status = error_code(sqs.send_message_batch, QueueUrl=url,
                              Entries=[{"Id": f"x{i}", "MessageBody": "b"} for i in range(11)])
    check(code == "AWS.SimpleQueueService.TooManyEntriesInBatchRequest" and status == 400, f"{code} {status}")
    code, _ = error_code(sqs.send_message_batch, QueueUrl=url,
                         Entries=[{"Id": "same", "MessageBody": "a"}, {"Id": "same", "MessageBody": "b"}])
    check(code == "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", f"{code}")
    code, _ = error_code(sqs.send_message_batch, QueueUrl=url,
                         Entries=[{"Id": "a", "MessageBody": "x" * 140000}, {"Id": "b", "MessageBody": "y" * 140000}])
    check(code == "AWS.SimpleQueueService.BatchRequestTooLong", f"{code}")


def case_errors():
    code, status = error_code(sqs.get_queue_url, QueueName=f"missing-{run}")
    check(code == "AWS.SimpleQueueService.NonExistentQueue" and status == 400, f"{code} {status}")
    code, _ = error_code(sqs.send_message, QueueUrl=f"{endpoint}/000000000000/missing-{run}", MessageBody="x")
    check(code == "AWS.SimpleQueueService.NonExistentQueue", f"send to a missing queue: {code}")
    url = sqs.create_queue(QueueName=f"err-{run}")["QueueUrl"]
    code, _ = error_code(sqs.send_message, QueueUrl=url, MessageBody="x" * 262145)
    check(code == "InvalidParameterValue", f"too large: {code}")
    code, _ = error_code(sqs.send_message, QueueUrl=url, MessageBody="bad \x01 char")
    check(code == "InvalidMessageContents", f"bad char: {code}")
    code, _ = error_code(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=11)
    check(code == "InvalidParameterValue", f"11 messages: {code}")
    code, _ = error_code(sqs.delete_message, QueueUrl=url, ReceiptHandle="garbage")
    check(code == "ReceiptHandleIsInvalid", f"bad handle: {code}")
    code, _ = error_code(sqs.create_queue, QueueName="bad name!")
    check(code == "InvalidParameterValue", f"bad name: {code}")
    code, _ = error_code(sqs.set_queue_attributes, QueueUrl=url, Attributes={"NoSuchThing": "1"})
    check(code == "InvalidAttributeName", f"unknown attribute: {code}")
    code, _ = error_code(sqs.create_queue, QueueName=f"err-{run}", Attributes={"VisibilityTimeout": "99"})
    check(code == "QueueAlreadyExists", f"exists with other attributes: {code}")
    check(sqs.create_queue(QueueName=f"err-{run}")["QueueUrl"] == url, "the same CreateQueue again")


def case_list():
    names = [f"lst-{run}-{i:02d}" for i in range(12)]
    for n in names:
        sqs.create_queue(QueueName=n)
    r = sqs.list_queues(QueueNamePrefix=f"lst-{run}-")
    check([u.rsplit("/", 1)[1] for u in r["QueueUrls"]] == names, f"list {r}")
    seen, token = [], None
    while True:
        kw = {"QueueNamePrefix": f"lst-{run}-", "MaxResults": 5}
        if token:
            kw["NextToken"] = token
        r = sqs.list_queues(**kw)
        seen += [u.rsplit("/", 1)[1] for u in r.get("QueueUrls", [])]
        token = r.get("NextToken")
        if not token:
            break
    check(seen == names, f"paged {seen}")
    r = sqs.list_queues(QueueNamePrefix=f"none-{run}")
    check("QueueUrls" not in r, f"no match {r}")


def case_redrive():
    dlq = sqs.create_queue(QueueName=f"dlq-{run}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    src = sqs.create_queue(QueueName=f"src-{run}", Attributes={
        "VisibilityTimeout": "1",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})})["QueueUrl"]
    rp = json.loads(sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["RedrivePolicy"])
                    ["Attributes"]["RedrivePolicy"])
    check(rp == {"deadLetterTargetArn": arn, "maxReceiveCount": 2}, f"RedrivePolicy {rp}")
    attrs = {"kind": {"DataType": "String", "StringValue": "poison"},
             "n": {"DataType": "Number", "StringValue": "42"},
             "raw": {"DataType": "Binary", "BinaryValue": b"\x00\xffbin"}}
    sent = sqs.send_message(QueueUrl=src, MessageBody="poison", MessageAttributes=attrs)
    check(sent["MD5OfMessageAttributes"] == md5_of_attributes(attrs), "MD5OfMessageAttributes sent")
    counts = []
    deadline = time.time() + 30
    while time.time() < deadline:
        r = sqs.receive_message(QueueUrl=src, AttributeNames=["ApproximateReceiveCount"], WaitTimeSeconds=2)
        for m in r.get("Messages", []):
            counts.append(int(m["Attributes"]["ApproximateReceiveCount"]))
        d = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1, MessageAttributeNames=["All"],
                                AttributeNames=["ApproximateFirstReceiveTimestamp"])
        if d.get("Messages"):
            dm = d["Messages"][0]
            check(dm["Body"] == "poison", "the dead letter's body")
            # The dead letter keeps the MessageAttributes (botocore checks the MD5 too).
            check(dm.get("MessageAttributes") == attrs, f"the dead letter's attributes {dm.get('MessageAttributes')}")
            check(dm.get("MD5OfMessageAttributes") == md5_of_attributes(attrs), "the dead letter's MD5OfMessageAttributes")
            first = int(dm["Attributes"]["ApproximateFirstReceiveTimestamp"])
            check(abs(first - time.time() * 1000) < 60000, f"the DLQ's first receive is its own: {first}")
            break
    else:
        check(False, f"never reached the dead-letter queue; receives {counts}")
    check(counts == [1, 2], f"received exactly maxReceiveCount times, visibility expiry counted: {counts}")
    srcs = sqs.list_dead_letter_source_queues(QueueUrl=dlq)
    check(srcs["queueUrls"] == [src], f"ListDeadLetterSourceQueues {srcs}")


def case_fifo():
    url = sqs.create_queue(QueueName=f"f-{run}.fifo", Attributes={"FifoQueue": "true",
                                                                 "ContentBasedDeduplication": "true"})["QueueUrl"]
    a = sqs.send_message(QueueUrl=url, MessageBody="one", MessageGroupId="g1")
    b = sqs.send_message(QueueUrl=url, MessageBody="one", MessageGroupId="g1")   # a duplicate
    check(a["MessageId"] == b["MessageId"], "content-based deduplication answers the first's id")
    c = sqs.send_message(QueueUrl=url, MessageBody="two", MessageGroupId="g1", MessageDeduplicationId="d2")
    sqs.send_message(QueueUrl=url, MessageBody="other", MessageGroupId="g2")
    check(int(c["SequenceNumber"]) > int(a["SequenceNumber"]), "SequenceNumber grows")
    code, _ = error_code(sqs.send_message, QueueUrl=url, MessageBody="x")
    check(code == "MissingParameter", f"no group: {code}")
    r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
    bodies = [m["Body"] for m in r.get("Messages", [])]
    check("one" in bodies and "two" not in bodies, f"strict order in g1: {bodies}")
    for m in r["Messages"]:
        check(m["Attributes"]["MessageGroupId"] in ("g1", "g2"), "MessageGroupId")
        check(len(m["Attributes"]["SequenceNumber"]) == 20, "SequenceNumber")
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2)
    check([m["Body"] for m in r.get("Messages", [])] == ["two"], f"then two: {r.get('Messages')}")
    # Without ContentBasedDeduplication a send needs its MessageDeduplicationId.
    plain = sqs.create_queue(QueueName=f"p-{run}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    code, _ = error_code(sqs.send_message, QueueUrl=plain, MessageBody="x", MessageGroupId="g")
    check(code == "InvalidParameterValue", f"no deduplication id: {code}")
    sqs.send_message(QueueUrl=plain, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="1")
    code, _ = error_code(sqs.create_queue, QueueName=f"nofifo-{run}.fifo")
    check(code == "InvalidParameterValue", f"a .fifo name without FifoQueue: {code}")


def case_tags_purge_delete():
    url = sqs.create_queue(QueueName=f"tp-{run}", tags={"team": "core"})["QueueUrl"]
    sqs.tag_queue(QueueUrl=url, Tags={"env": "test"})
    check(sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "core", "env": "test"}, "tags")
    sqs.untag_queue(QueueUrl=url, TagKeys=["team"])
    check(sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "test"}, "untag")
    for i in range(25):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3)
    sqs.purge_queue(QueueUrl=url)
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    check(a["ApproximateNumberOfMessages"] == "0" and a["ApproximateNumberOfMessagesNotVisible"] == "0",
          f"purged {a}")
    sqs.delete_queue(QueueUrl=url)
    code, _ = error_code(sqs.get_queue_url, QueueName=f"tp-{run}")
    check(code == "AWS.SimpleQueueService.NonExistentQueue", f"deleted: {code}")


globals()["case_" + case]()
print("ok", case)
