#!/usr/bin/python3
"""sqs_parse_xml.py - reads one query-protocol answer on stdin with Debian's
botocore (the parser boto3 1.26 and awscli use) and prints what it parsed as
JSON, for tests/test_sqs_codec.c to compare with the result it encoded.

    sqs_parse_xml.py ACTION STATUS < answer.xml

Blobs print as base64, ResponseMetadata is left out but for its RequestId,
printed as "RequestId". An error answer (STATUS >= 300) prints botocore's
"Error" dict."""
import base64
import json
import sys

import botocore.session
from botocore.model import ServiceModel
from botocore.parsers import create_parser


def plain(v):
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    return v


def main():
    action, status = sys.argv[1], int(sys.argv[2])
    loader = botocore.session.get_session().get_component("data_loader")
    model = ServiceModel(loader.load_service_model("sqs", "service-2", "2012-11-05"), "sqs")
    op = model.operation_model(action)
    parsed = create_parser("query").parse(
        {"body": sys.stdin.buffer.read(), "status_code": status, "headers": {}}, op.output_shape)
    meta = parsed.pop("ResponseMetadata", {})
    if "RequestId" in meta:
        parsed["RequestId"] = meta["RequestId"]
    json.dump(plain(parsed), sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
