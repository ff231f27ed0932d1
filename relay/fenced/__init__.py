"""The only code that touches another library's private API, each piece behind a setting.

Everything else in skillfleet uses the public API of the libraries it stands on. Each module
here depends on one library's internals: that library is pinned to a minor range in
pyproject.toml, the module says which private names it uses, and a setting turns it off.

- `kombu_redis` (kombu `>=5.7,<5.8`; off with `SKILLFLEET_FENCED_KOMBU=false`): a worker
  survives losing Redis with unacknowledged messages in hand. kombu's Redis channel raises
  AttributeError restoring them once the connection is detached, and Celery stops the worker
  for good (with kombu's Sentinel channel too, when the primary dies); tests/workers/
  test_reliability.py and test_redis_failover.py fail without it.
- `uvicorn_http` (uvicorn `>=0.55,<0.56`; off with `SKILLFLEET_FENCED_UVICORN=false`): time
  limits on a request's headers and body (slowloris, a body never sent), and a lost connection
  ends every response open on it; tests/api/test_live_streams.py's slow-client tests fail
  without it.

These are kept for correctness. No fast path was worth keeping: each measured less than 5 % of
a goal figure (docs/benchmarks.md).
"""
