"""A run's task message and "task-sent" event are the ones Celery's send_task would send."""

from __future__ import annotations

import base64
import json
import time
import uuid

from conftest import REDIS_URL

from broker.dispatcher import EXECUTE_TASK
from relay.app import create_celery
from relay.taskmessage import (
    new_task_id,
    push,
    sent_event,
    sent_event_channel,
    task_message,
)
from store.settings import Settings

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
        push(pipe, queue, task_message(new_task_id(), EXECUTE_TASK, ["r-1"], queue, shadow))
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
    first, second = (
        json.loads(task_message(new_task_id(), EXECUTE_TASK, ["r"], "spark", "s")) for _ in "ab"
    )
    assert first["headers"]["id"] != second["headers"]["id"]
    assert first["properties"]["delivery_tag"] != second["properties"]["delivery_tag"]


def _next_event(pubsub) -> tuple[str, dict, dict]:
    """The channel, envelope and decoded body of the next event published."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
        if message is not None:
            envelope = json.loads(message["data"])
            body = json.loads(base64.b64decode(envelope.pop("body")))
            return message["channel"].decode(), envelope, body
    raise AssertionError("no event was published")


def test_the_sent_event_is_the_one_send_task_publishes_but_it_names_the_shadow(redis_client):
    queue = f"node.t-{uuid.uuid4().hex[:8]}"
    shadow = "run r-1 on " + queue
    celery = create_celery(Settings(redis_url=REDIS_URL), task_send_sent_event=True)
    exchange = celery.conf.event_exchange
    db = redis_client.connection_pool.connection_kwargs.get("db", 0)
    pubsub = redis_client.pubsub()
    pubsub.psubscribe(f"/{db}.{exchange}/*")  # whatever Celery publishes for this database
    try:
        celery.send_task(EXECUTE_TASK, args=["r-1"], queue=queue, shadow=shadow, ignore_result=True)
        celerys_channel, celerys, celerys_body = _next_event(pubsub)
        clock = celery.clock.forward()
        event = sent_event(exchange, clock, "t-1", shadow, ["r-1"], queue)
        redis_client.publish(sent_event_channel(db, exchange), event)
        ours_channel, ours, body = _next_event(pubsub)
    finally:
        pubsub.close()
        redis_client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
        celery.close()
    assert ours_channel == celerys_channel
    assert ours["properties"].pop("delivery_tag") != celerys["properties"].pop("delivery_tag")
    assert ours == celerys
    # Celery's event names the task; ours names what Flower should show, with our ids and clock.
    assert celerys_body.pop("name") == EXECUTE_TASK
    assert (body.pop("name"), body.pop("uuid"), body.pop("root_id")) == (shadow, "t-1", "t-1")
    assert celerys_body.pop("uuid") == celerys_body.pop("root_id")
    assert body.pop("clock") == clock > celerys_body.pop("clock")
    assert celerys_body.pop("timestamp") <= body.pop("timestamp")
    assert body == celerys_body
