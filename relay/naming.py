"""Every queue name and Redis key skillfleet uses, in one place."""

from __future__ import annotations

from store.names import is_valid_name

PREFIX = "skillfleet"

CONTROL = "control"
SPARK = "spark"
SANDBOX = "sandbox"
NODE_PREFIX = "node."


def is_node_name(name: object) -> bool:
    """Node names follow the one name grammar of store/names.py."""
    return is_valid_name(name)


def node_queue(node: str) -> str:
    """The Celery queue of one managed node."""
    return f"{NODE_PREFIX}{node}"


def queue_for(execution: str, node: str | None) -> str:
    """The queue a skill's scripts run on: `node.<name>`, `spark` or `sandbox`."""
    if execution == "node":
        if node is None:
            raise ValueError("a node skill needs a node")
        return node_queue(node)
    if execution in (SPARK, SANDBOX):
        return execution
    raise ValueError(f"unknown execution {execution!r}")


def run_stream(run_id: str) -> str:
    """The Redis Stream holding a run's output and status events."""
    return f"{PREFIX}:run:{run_id}:events"


def run_end(run_id: str) -> str:
    """A one-entry Redis Stream written with a run's exit event, for those who wait only for it."""
    return f"{PREFIX}:run:{run_id}:end"


def run_resent(run_id: str) -> str:
    """A key marking a queued run whose message the sweep sent once more (broker.runs)."""
    return f"{PREFIX}:run:{run_id}:resent"


def run_cancel(run_id: str) -> str:
    """A key whose existence asks the runner of a run to stop it."""
    return f"{PREFIX}:run:{run_id}:cancel"


def approval_trace(approval_id: str) -> str:
    """The trace context of the call an approval asks about, kept while it waits for the owner
    (broker/traces.py; only when traces are on)."""
    return f"{PREFIX}:approval:{approval_id}:trace"


def worker_key(instance: str) -> str:
    """A worker instance's heartbeat (a hash with a TTL)."""
    return f"{PREFIX}:worker:{instance}"


def queue_workers(queue: str) -> str:
    """Sorted set of worker instances serving a queue, scored by their last heartbeat."""
    return f"{PREFIX}:queue:{queue}:workers"


def named_workers(name: str) -> str:
    """Sorted set of the worker instances beating under a node's name (or a runner's: spark,
    sandbox), serving or not, scored like `all_workers`: a node's workers without the fleet's."""
    return f"{PREFIX}:name:{name}:workers"


def beating_names() -> str:
    """Sorted set of every node name and worker role heard from (an instance id's part before
    `@`), scored by the deadline of its newest beat: the fleet's health in one key."""
    return f"{PREFIX}:names"


def all_workers() -> str:
    """Sorted set of every worker instance, scored by its last heartbeat."""
    return f"{PREFIX}:workers"


def node_sync(node: str, db: int) -> str:
    """Pub/sub channel asking a node agent to sync its skill packages now. Channels are the
    server's, not a database's, hence the number: another deployment on the same server, in
    another database, must not make this one's nodes sync."""
    return f"{PREFIX}:node:{node}:sync:{db}"


def nodes_sync(db: int) -> str:
    """Pub/sub channel asking every node agent to sync its skill packages now (see node_sync)."""
    return f"{PREFIX}:nodes:sync:{db}"


def run_events_channel(run_id: str) -> str:
    """Pub/sub channel announcing that a run's stream got a new entry (wakes waiters)."""
    return f"{PREFIX}:run:{run_id}:wake"


def tokens_generation() -> str:
    """A counter bumped whenever a token is deleted, so every API process drops cached tokens."""
    return f"{PREFIX}:tokens:generation"


def skills_generation() -> str:
    """A counter bumped after every change to the skills index (store/indexcache.py)."""
    return f"{PREFIX}:skills:generation"


def failed_logins(address: str) -> str:
    """A client address's count of wrong tokens in its current window (relay/lockouts.py)."""
    return f"{PREFIX}:auth:failures:{address}"


def lockouts() -> str:
    """Redis Stream of the client addresses locked out for wrong tokens, and when each lock ends."""
    return f"{PREFIX}:auth:lockouts"


def github_signin(signin_id: str) -> str:
    """A hash: one GitHub device-flow sign-in under way (its device code, interval, next poll)."""
    return f"{PREFIX}:signin:github:{signin_id}"


def github_signin_lock(signin_id: str) -> str:
    """Held while one request polls GitHub for that sign-in."""
    return f"{PREFIX}:signin:github:{signin_id}:lock"


def github_signin_starts(address: str) -> str:
    """How many sign-ins a client address started in the current window."""
    return f"{PREFIX}:signin:github:starts:{address}"


def github_refresh_lock(token_id: int) -> str:
    """Held while one request refreshes a GitHub sign-in (its refresh token works once)."""
    return f"{PREFIX}:signin:github:refresh:{token_id}"


def lockouts_generation() -> str:
    """A counter bumped whenever an address is locked out, so every API process reads lockouts."""
    return f"{PREFIX}:auth:lockouts:generation"


def generations_channel(db: int) -> str:
    """Pub/sub channel naming each generation of database `db` as it is bumped
    (relay/generations.py); channels are the server's, not a database's, hence the number."""
    return f"{PREFIX}:generations:{db}"


def mcp_cancels_channel(db: int) -> str:
    """Pub/sub channel carrying MCP clients' cancellations to the API process serving the call
    (api/asgi.py): a handshake-era client sends one in a request of its own, which may reach
    another process."""
    return f"{PREFIX}:mcp-cancels:{db}"


def owner_events(owner_id: int) -> str:
    """The Redis Stream of one owner's changes (approvals, calls, runs, job runs) for frontends."""
    return f"{PREFIX}:owner:{owner_id}:events"


def turn_stream(turn_id: str) -> str:
    """The Redis Stream of an agent turn: assistant text, tool calls and its end."""
    return f"{PREFIX}:turn:{turn_id}:events"


def turn_stop(turn_id: str) -> str:
    """A key whose existence asks the worker running a turn to stop it."""
    return f"{PREFIX}:turn:{turn_id}:stop"


def hub_wake(process: str) -> str:
    """A stream of one API process's stream hub: an entry wakes its blocking read (relay/hub.py)."""
    return f"{PREFIX}:hub:{process}:wake"


def stream_slots(token: str) -> str:
    """Sorted set of one token's open streams and waits, scored by when each lease lapses."""
    return f"{PREFIX}:streams:{token}"


def listen_slots(token: str) -> str:
    """Sorted set of one token's open MCP `subscriptions/listen` streams, scored by when each
    lease lapses (api/mcp/listens.py)."""
    return f"{PREFIX}:mcp-listens:{token}"


# The consumer group of the control worker that turns owner events into push and webhooks.
NOTIFY_GROUP = "notifications"


def webhook_retries() -> str:
    """Sorted set of webhook deliveries to try again, scored by when (epoch seconds)."""
    return f"{PREFIX}:webhooks:retries"


def counter(name: str) -> str:
    """A counter every process adds to (relay/counters.py): a hash of label values to counts."""
    return f"{PREFIX}:counter:{name}"


def ended_runs() -> str:
    """Sorted set of the runs whose stream ended, scored by when (relay/retention.py)."""
    return f"{PREFIX}:runs:ended"


def ended_turns() -> str:
    """Sorted set of the agent turns whose stream ended, scored by when (relay/retention.py)."""
    return f"{PREFIX}:turns:ended"


def notify_due(owner_id: int) -> str:
    """A key whose existence says a notify task for the owner is on its way (relay/notifier.py)."""
    return f"{PREFIX}:owner:{owner_id}:notify"


def notices_of_turn(owner_id: int, turn_id: str) -> str:
    """How many notify_owner notices one agent turn of the owner sent (broker/ownertools.py)."""
    return f"{PREFIX}:owner:{owner_id}:notices:turn:{turn_id}"


def notices_of_hour(owner_id: int, hour: int) -> str:
    """How many notify_owner notices the owner was sent in one hour (epoch hours)."""
    return f"{PREFIX}:owner:{owner_id}:notices:hour:{hour}"
