"""Notifications on the control worker: owner events become Web Push messages and webhooks.

A notice sends `skillfleet.notify` for its owner as it is published (relay/notifier.py), and
the housekeeping sends it when a webhook retry is due: `deliver` hands out that owner's new
events, then the retries that are due. Beat's sweep calls `pump` every minute, for every
listening owner, to deliver what a lost wake left. Both read an owner's event feed
(relay/events.py) through the consumer group `notifications`, so every event is handed out once
however many control workers run; push messages go out at once, webhook deliveries too, and a
delivery that fails is tried again later (a Redis sorted set of due retries), never inside the
call or run that published the event.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import redis
import structlog

from broker.approvals import asked
from relay import events, naming, notifier, push
from relay.counters import DELIVERIES
from relay.events import PUSH_TITLES, WEBHOOK_KINDS, ensure_group
from store import notifications
from store.db import SessionFactory, transaction
from store.egress import Egress
from store.errors import ConfigError
from store.models import Approval, Webhook
from store.secrets import Sealer
from store.visible import visible
from workers import webhooks, webpush

log = structlog.get_logger(__name__)

CONSUMER = "control"
READ_COUNT = 100
# Outcomes of a delivery attempt, as counted in skillfleet_deliveries_total.
DELIVERED = "delivered"
FAILED = "failed"


@dataclass
class NotifyContext:
    sessions: SessionFactory
    redis: redis.Redis
    sealer: Sealer
    vapid: Any  # py_vapid.Vapid
    contact: str
    push_services: tuple[str, ...]
    # Where deliveries may go: public addresses, and the hosts SKILLFLEET_EGRESS_ALLOW names.
    egress: Egress = field(default_factory=Egress)


def pump(context: NotifyContext) -> int:
    """Hand out every new event of every listening owner, then the retries that are due."""
    with context.sessions() as session:
        owners = notifications.listening_owners(session)
    handled = 0
    for owner_id in owners:
        handled += _owner_events(context, owner_id)
    _due_retries(context)
    return handled


def deliver(context: NotifyContext, owner_id: int) -> int:
    """Hand out the owner's new events (its notify task), then the retries that are due."""
    notifier.woken(context.redis, owner_id)
    with context.sessions() as session:
        listening = notifications.is_listening(session, owner_id)
    handled = _owner_events(context, owner_id) if listening else 0
    _due_retries(context)
    return handled


def _owner_events(context: NotifyContext, owner_id: int) -> int:
    key = naming.owner_events(owner_id)
    ensure_group(context.redis, owner_id)
    reply: Any = context.redis.xreadgroup(
        naming.NOTIFY_GROUP, CONSUMER, {key: ">"}, count=READ_COUNT
    )
    handled = 0
    for _key, entries in reply or []:
        for entry_id, fields in entries:
            event = events.decode(entry_id, fields)
            # The feed also carries state changes for frontends (approval.created, run.state...);
            # only notices of what waits or went wrong are pushed or sent to webhooks.
            if event.kind in WEBHOOK_KINDS:
                _notify(context, owner_id, event)
                handled += 1
            context.redis.xack(key, naming.NOTIFY_GROUP, event.id)
    return handled


def _notify(context: NotifyContext, owner_id: int, event: events.OwnerEvent) -> None:
    title = PUSH_TITLES.get(event.kind)
    if title is not None:
        _push(context, owner_id, event, title)
    with context.sessions() as session:
        hooks = notifications.webhooks(session, owner_id)
    for hook in hooks:
        if "*" in hook.events or event.kind in hook.events:
            _deliver(context, hook, owner_id, event, attempt=1)


def described(context: NotifyContext, owner_id: int, event: events.OwnerEvent) -> dict[str, Any]:
    """The event's data as pushed and sent to webhooks: a waiting approval also says who
    asked (the chat and turn, or the job and job run), in its fields and its message."""
    data = dict(event.data)
    if event.kind != "approval.waiting" or not isinstance(data.get("approval_id"), str):
        return data
    with context.sessions() as session:
        approval = session.get(Approval, data["approval_id"])
        if approval is None or approval.owner_id != owner_id:
            return data  # removed with its chat meanwhile: the notice still goes out
        origin = asked(session, [approval])[approval.id]
    data.update(
        chat_id=origin.chat_id, turn_id=origin.turn_id, job_id=origin.job_id,
        job_name=origin.job_name, job_run_id=origin.job_run_id, asked_by=origin.by,
        message=f"{approval.tool} waits for your approval, asked by {origin.by}.",
    )  # fmt: skip
    return data


def _push(context: NotifyContext, owner_id: int, event: events.OwnerEvent, title: str) -> None:
    data = {"kind": event.kind, "title": title, "id": event.id}
    data.update(described(context, owner_id, event))
    # A notification shows what agents wrote (a question, a notice, a chat's id) to the owner:
    # control and format characters go as escapes, as on the console and in the CLI.
    payload = {key: visible(v) if isinstance(v, str) else v for key, v in data.items()}
    with context.sessions() as session:
        targets = [
            (row.id, webpush.Target(row.endpoint, row.p256dh, row.auth))
            for row in notifications.subscriptions(session, owner_id)
        ]
    for subscription_id, target in targets:
        if not push.endpoint_allowed(target.endpoint, context.push_services, context.egress):
            continue  # the allow-list shrank since it was saved
        status = webpush.send(target, payload, context.vapid, context.contact, context.egress)
        DELIVERIES.add(context.redis, "push", DELIVERED if 200 <= status < 300 else FAILED)
        if status in webpush.GONE:
            with transaction(context.sessions) as session:
                notifications.drop_subscription(session, subscription_id)
            log.info("push subscription dropped", owner_id=owner_id, status=status)


def _deliver(
    context: NotifyContext, hook: Webhook, owner_id: int, event: events.OwnerEvent, attempt: int
) -> None:
    try:
        secret = context.sealer.unseal(hook.secret)
    except ConfigError:
        log.warning("webhook secret unreadable", webhook_id=hook.id)
        DELIVERIES.add(context.redis, "webhook", FAILED)
        return
    data = described(context, owner_id, event)
    delivered = webhooks.deliver(context.egress, hook.url, secret, event.id, event.kind, data)
    DELIVERIES.add(context.redis, "webhook", DELIVERED if delivered else FAILED)
    if delivered:
        return
    delay = webhooks.retry_delay(attempt)
    if delay is None:
        log.warning("webhook given up", webhook_id=hook.id, event_id=event.id)
        return
    member = json.dumps(
        {"webhook": hook.id, "owner": owner_id, "event": event.id, "attempt": attempt + 1}
    )
    context.redis.zadd(naming.webhook_retries(), {member: time.time() + delay})


def _due_retries(context: NotifyContext) -> None:
    key = naming.webhook_retries()
    due: Any = context.redis.zrangebyscore(key, "-inf", time.time(), start=0, num=READ_COUNT)
    for member in due:
        if not context.redis.zrem(key, member):
            continue  # another worker took it
        retry = json.loads(member)
        with context.sessions() as session:
            hook = session.get(Webhook, retry["webhook"])
        found = events.read_one(context.redis, retry["owner"], retry["event"])
        if hook is None or found is None:
            continue  # the webhook was removed or the event trimmed from the feed
        _deliver(context, hook, retry["owner"], found, retry["attempt"])
