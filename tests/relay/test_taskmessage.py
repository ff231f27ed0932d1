"""A run's task message is the one Celery's send_task would push, field for field."""

from __future__ import annotations

import base64
import json
import uuid

from conftest import REDIS_URL

from relay.app import create_celery
from relay.dispatch import EXECUTE_TASK
from relay.taskmessage import push, task_message
from skillfleet.settings import Settings

# Set per message (or per sending process and thread) by both sides.
PER_MESSAGE_HEADERS = ("id", "root_id")
PER_MESSAGE_PROPERTIES = ("correlation_id", "delivery_tag", "reply_to")


def test_the_message_equals_what_send_task_pushes_but_for_its_ids(redis_client):
    queue = f"node.t-{uuid.uuid4().hex[:8]}"
    shadow = "run r-1 on " + queue
    celery = create_celery(Settings(redis_url=REDIS_URL))
    try:
        celery.send_task(EXECUTE_TASK, args=["r-1"], queue=queue, shadow=shadow, ignore_result=True)
        pipe = redis_client.pipeline(transaction=False)
        push(pipe, queue, task_message(EXECUTE_TASK, ["r-1"], queue, shadow))
        pipe.execute()
        ours, celerys = (json.loads(raw) for raw in redis_client.lrange(queue, 0, -1))
    finally:
        redis_client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
        celery.close()
    assert base64.b64decode(ours.pop("body")) == base64.b64decode(celerys.pop("body"))
    assert ours["headers"]["root_id"] == ours["headers"]["id"]
    assert ours["properties"]["correlation_id"] == ours["headers"]["id"]
    for key in PER_MESSAGE_HEADERS:
        assert ours["headers"].pop(key) != celerys["headers"].pop(key)
    for key in PER_MESSAGE_PROPERTIES:
        ours["properties"].pop(key)
        celerys["properties"].pop(key)
    assert ours == celerys


def test_each_message_has_its_own_ids():
    first, second = (json.loads(task_message(EXECUTE_TASK, ["r"], "spark", "s")) for _ in "ab")
    assert first["headers"]["id"] != second["headers"]["id"]
    assert first["properties"]["delivery_tag"] != second["properties"]["delivery_tag"]
