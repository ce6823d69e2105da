#!/usr/bin/python3
"""sqs_vectors.py - test vectors for tests/test_sqs_codec.c, made by code
nobody here wrote: Debian's botocore (python3-botocore 1.29, the one boto3
1.26 and the query protocol use) serializes SQS requests, and hashlib computes
MD5OfMessageAttributes by the algorithm of the SQS developer guide
("Calculating the MD5 message digest for message attributes"), written here
independently of src/sqs/attributes.c.

    /usr/bin/python3 tests/sqs_vectors.py    # rewrites tests/fixtures/sqs/*.tsv

query.tsv: action TAB form body (as botocore sends it) TAB the parameters in
the JSON protocol's shape (every scalar a string, as the query protocol
carries them; blobs base64), one request per line.
md5.tsv: MessageAttributes JSON TAB its MD5OfMessageAttributes.
"""
import base64
import hashlib
import json
import os
import struct

import botocore
import botocore.session
from botocore.awsrequest import AWSRequest
from botocore.serialize import create_serializer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "sqs")
Q = "http://127.0.0.1:9324/000000000000/orders"

ATTRS = {
    "s": {"DataType": "String", "StringValue": "hello & = + % wörld \u2603 \U0001F600"},
    "n": {"DataType": "Number", "StringValue": "-12.5e3"},
    "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xfe\xff binary"},
    "custom.type": {"DataType": "String.json", "StringValue": '{"a": [1, 2]}'},
    "bin.custom": {"DataType": "Binary.gif", "BinaryValue": b"GIF89a"},
}

REQUESTS = [
    ("CreateQueue", {"QueueName": "orders", "Attributes": {
        "VisibilityTimeout": "45", "DelaySeconds": "3", "RedrivePolicy": json.dumps(
            {"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:dead", "maxReceiveCount": 5})},
        "tags": {"team": "payments", "env": "prod", "empty": ""}}),
    ("CreateQueue", {"QueueName": "orders.fifo",
                     "Attributes": {"FifoQueue": "true", "ContentBasedDeduplication": "true"}}),
    ("GetQueueUrl", {"QueueName": "orders", "QueueOwnerAWSAccountId": "000000000000"}),
    ("ListQueues", {"QueueNamePrefix": "ord", "MaxResults": 5, "NextToken": "b3JkZXJz"}),
    ("ListQueues", {}),
    ("DeleteQueue", {"QueueUrl": Q}),
    ("PurgeQueue", {"QueueUrl": Q}),
    ("GetQueueAttributes", {"QueueUrl": Q, "AttributeNames": ["All", "QueueArn", "VisibilityTimeout"]}),
    ("SetQueueAttributes", {"QueueUrl": Q, "Attributes": {"ReceiveMessageWaitTimeSeconds": "20",
                                                          "MaximumMessageSize": "262144"}}),
    ("SendMessage", {"QueueUrl": Q, "MessageBody": "line one\nline two\r\n\ttab & more = + %25 \u00e9\U0001F600",
                     "DelaySeconds": 0}),
    ("SendMessage", {"QueueUrl": Q + ".fifo", "MessageBody": "{\"order\": 17}",
                     "MessageAttributes": ATTRS,
                     "MessageSystemAttributes": {"AWSTraceHeader": {
                         "DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}},
                     "MessageGroupId": "customer-1", "MessageDeduplicationId": "d-1"}),
    ("SendMessageBatch", {"QueueUrl": Q, "Entries": [
        {"Id": "e%d" % i, "MessageBody": "body %d" % i, "DelaySeconds": i % 3,
         **({"MessageAttributes": {"k": {"DataType": "Number", "StringValue": str(i)}}} if i % 4 == 0 else {})}
        for i in range(1, 13)]}),
    ("ReceiveMessage", {"QueueUrl": Q, "AttributeNames": ["All"], "MessageAttributeNames": ["All", "k.*"],
                        "MaxNumberOfMessages": 10, "VisibilityTimeout": 0, "WaitTimeSeconds": 20,
                        "ReceiveRequestAttemptId": "attempt-1"}),
    ("DeleteMessage", {"QueueUrl": Q, "ReceiptHandle": "MTIzOmFiYw+/="}),
    ("DeleteMessageBatch", {"QueueUrl": Q, "Entries": [
        {"Id": "a", "ReceiptHandle": "h1"}, {"Id": "b", "ReceiptHandle": "h+2/="}]}),
    ("ChangeMessageVisibility", {"QueueUrl": Q, "ReceiptHandle": "h1", "VisibilityTimeout": 43200}),
    ("ChangeMessageVisibilityBatch", {"QueueUrl": Q, "Entries": [
        {"Id": "a", "ReceiptHandle": "h1", "VisibilityTimeout": 0},
        {"Id": "b", "ReceiptHandle": "h2", "VisibilityTimeout": 30}]}),
    ("TagQueue", {"QueueUrl": Q, "Tags": {"a": "1", "b": "two words"}}),
    ("UntagQueue", {"QueueUrl": Q, "TagKeys": ["a", "b"]}),
    ("ListQueueTags", {"QueueUrl": Q}),
    ("ListDeadLetterSourceQueues", {"QueueUrl": Q, "MaxResults": 1000, "NextToken": "t"}),
]


def json_shape(value):
    """The parameters as retryd's decoder gives them: every scalar a string."""
    if isinstance(value, dict):
        return {k: json_shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_shape(v) for v in value]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def query_vectors(model):
    serializer = create_serializer("query")
    lines = []
    for action, params in REQUESTS:
        req = serializer.serialize_to_request(params, model.operation_model(action))
        prepared = AWSRequest(method="POST", url="https://sqs.us-east-1.amazonaws.com/",
                              data=req["body"], headers=req["headers"]).prepare()
        body = prepared.body if isinstance(prepared.body, str) else prepared.body.decode()
        assert "\t" not in body and "\n" not in body
        lines.append("%s\t%s\t%s\n" % (action, body, json.dumps(json_shape(params), ensure_ascii=True)))
    return lines


def md5_of_attributes(attrs):
    """The SQS developer guide's algorithm, over the attributes as sent."""
    out = b""
    for name in sorted(attrs):
        a = attrs[name]
        for field in (name, a["DataType"]):
            raw = field.encode()
            out += struct.pack(">I", len(raw)) + raw
        if "StringValue" in a:
            raw = a["StringValue"].encode()
            out += b"\x01" + struct.pack(">I", len(raw)) + raw
        else:
            raw = a["BinaryValue"]
            out += b"\x02" + struct.pack(">I", len(raw)) + raw
    return hashlib.md5(out).hexdigest()


MD5_CASES = [
    ATTRS,
    {"one": {"DataType": "String", "StringValue": "v"}},
    {"Z": {"DataType": "Number", "StringValue": "1"}, "a": {"DataType": "Number", "StringValue": "2"},
     "_": {"DataType": "String", "StringValue": "3"}, "-": {"DataType": "String", "StringValue": "4"}},
    {"bin": {"DataType": "Binary", "BinaryValue": bytes(range(256))}},
    {"big": {"DataType": "String", "StringValue": "x" * 300}},
]


def md5_vectors():
    lines = []
    for case in MD5_CASES:
        lines.append("%s\t%s\n" % (json.dumps(json_shape(case), ensure_ascii=True), md5_of_attributes(case)))
    return lines


def main():
    loader = botocore.session.get_session().get_component("data_loader")
    from botocore.model import ServiceModel
    model = ServiceModel(loader.load_service_model("sqs", "service-2", "2012-11-05"), "sqs")
    assert model.protocol == "query", "needs Debian's botocore (query protocol): run /usr/bin/python3"
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "query.tsv"), "w") as f:
        f.write("# made by tests/sqs_vectors.py with botocore %s\n" % botocore.__version__)
        f.writelines(query_vectors(model))
    with open(os.path.join(OUT, "md5.tsv"), "w") as f:
        f.write("# made by tests/sqs_vectors.py (hashlib)\n")
        f.writelines(md5_vectors())


if __name__ == "__main__":
    main()
