"""celery_tasks.py - a Celery app on kombu's sqs:// broker pointed at retryd's
SQS endpoint (tests/sqs/celery_flow.py runs it). The tasks record what they
did as files in RETRYD_CELERY_DIR, so the test sees each run."""
import os

from celery import Celery

endpoint = os.environ["RETRYD_SQS_HOSTPORT"]          # 127.0.0.1:PORT
queue = os.environ["RETRYD_CELERY_QUEUE"]
out = os.environ["RETRYD_CELERY_DIR"]

app = Celery("retryd_celery_test", broker=f"sqs://test:test@{endpoint}")
app.conf.update(
    broker_transport_options={
        "is_secure": False, "region": "us-east-1", "wait_time_seconds": 1,
        "polling_interval": 0.2, "visibility_timeout": 2,
        "predefined_queues": {queue: {"url": f"http://{endpoint}/000000000000/{queue}",
                                      "access_key_id": "test", "secret_access_key": "test"}},
    },
    task_default_queue=queue,
    task_acks_late=True,
    # A failed task is rejected, not acknowledged: its message comes back when
    # its visibility runs out, and the queue's RedrivePolicy ends it in the
    # dead-letter queue after maxReceiveCount receives.
    task_acks_on_failure_or_timeout=False,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)


def note(name, text=""):
    with open(os.path.join(out, name), "a") as f:
        f.write(text + "\n")


@app.task
def add(x, y):
    note(f"add-{x}-{y}", str(x + y))
    return x + y


@app.task(bind=True, max_retries=3)
def flaky(self, key):
    note(f"flaky-{key}", f"try {self.request.retries}")
    if self.request.retries < 1:
        raise self.retry(countdown=1)
    note(f"flaky-{key}-done")


@app.task
def poison(key):
    note(f"poison-{key}", "run")
    raise RuntimeError("this task always fails")
