#!/usr/bin/python3
"""celery_flow.py ENDPOINT_HOSTPORT DIR - a Celery worker (Debian's
python3-celery 5.2 on kombu's sqs:// transport, python3-pycurl) running real
tasks through retryd's SQS endpoint: plain tasks, a task that retries once,
and a task that always fails, which lands in the dead-letter queue after
maxReceiveCount receives. Exits non-zero with a message on failure."""
import json
import os
import subprocess
import sys
import time
import uuid

import boto3

hostport, workdir = sys.argv[1], sys.argv[2]
run = uuid.uuid4().hex[:8]
queue, dlq = f"celery-{run}", f"celery-dlq-{run}"
sqs = boto3.client("sqs", endpoint_url=f"http://{hostport}", region_name="us-east-1",
                   aws_access_key_id="test", aws_secret_access_key="test")


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


dlq_url = sqs.create_queue(QueueName=dlq)["QueueUrl"]
arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
url = sqs.create_queue(QueueName=queue, Attributes={
    "VisibilityTimeout": "2",
    "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})})["QueueUrl"]

env = dict(os.environ, RETRYD_SQS_HOSTPORT=hostport, RETRYD_CELERY_QUEUE=queue,
           RETRYD_CELERY_DIR=workdir, PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
worker = subprocess.Popen(
    ["/usr/bin/python3", "-m", "celery", "-A", "celery_tasks", "worker", "--pool", "solo",
     "--loglevel", "INFO", "-Q", queue, "--without-heartbeat", "--without-mingle",
     "--without-gossip"],
    env=env, stdout=open(os.path.join(workdir, "worker.log"), "w"), stderr=subprocess.STDOUT)
try:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    os.environ.update(RETRYD_SQS_HOSTPORT=hostport, RETRYD_CELERY_QUEUE=queue, RETRYD_CELERY_DIR=workdir)
    import celery_tasks
    for i in range(5):
        celery_tasks.add.delay(i, 10)
    celery_tasks.flaky.delay("k1")
    celery_tasks.poison.delay("p1")

    def have(name):
        return os.path.exists(os.path.join(workdir, name))

    deadline = time.time() + 60
    dead = None
    while time.time() < deadline:
        if all(have(f"add-{i}-10") for i in range(5)) and have("flaky-k1-done") and dead:
            break
        if dead is None:
            r = sqs.receive_message(QueueUrl=dlq_url, WaitTimeSeconds=1)
            if r.get("Messages"):
                dead = r["Messages"][0]
        time.sleep(0.2)
    for i in range(5):
        check(have(f"add-{i}-10"), f"add({i}, 10) ran")
        check(open(os.path.join(workdir, f"add-{i}-10")).read().strip() == str(i + 10), "add's result")
    tries = open(os.path.join(workdir, "flaky-k1")).read().split("\n")
    check(have("flaky-k1-done") and tries[:2] == ["try 0", "try 1"], f"flaky retried once: {tries}")
    check(dead is not None, "the failing task's message reached the dead-letter queue")
    body = json.loads(__import__("base64").b64decode(dead["Body"]))
    check(body["headers"]["task"] == "celery_tasks.poison", f"the dead letter is the poison task: {body['headers']['task']}")
    runs = open(os.path.join(workdir, "poison-p1")).read().split()
    check(len(runs) == 2, f"the failing task ran maxReceiveCount (2) times: {len(runs)}")
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    check(a["ApproximateNumberOfMessages"] == "0" and a["ApproximateNumberOfMessagesNotVisible"] == "0",
          f"nothing left in the queue: {a}")
finally:
    worker.terminate()
    try:
        worker.wait(10)
    except subprocess.TimeoutExpired:
        worker.kill()
print("ok celery")
