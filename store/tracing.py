"""Traces (OpenTelemetry), on only when the standard OTEL_* variables ask for them.

Off (no OTEL_EXPORTER_OTLP_ENDPOINT, no OTEL_TRACES_EXPORTER), nothing of OpenTelemetry is
imported and every helper here returns at its first line. On, `start` sets up the SDK with a
batching exporter (spans leave from a thread of their own, so a collector that is slow or down
never holds a call) and the Celery instrumentation; the Flask, SQLAlchemy and Redis ones go on
the API's app, the process's engine and each of skillfleet's Redis clients as they are made
(`instrument_app`, `instrument_engine`, `instrument_redis`). A tool call is then one trace: the
API's request, the call and its policy decision, the owner's answer when it was asked
(broker/traces.py carries the call's context across that wait), the Celery task and the run on
its worker. A request, or a run's task, in a trace the sampler dropped runs with the
instrumentations quiet (`quiet_if_unsampled`): they would make spans only to drop them.

What a span may hold: skillfleet's own attributes (`skillfleet.call_id`, `tool`, `tier`,
`decision`, `rule`, `run_id`, `node`, `skill`, `skill_hash`, `status`), SQL statements (with
their placeholders; the SQLAlchemy instrumentation never records parameters), Redis commands
without their arguments (the Redis instrumentation's own sanitising), request paths without query
values (`scrub_request`). Never a tool call's arguments, a script's output or a secret: our spans
record an error by its type alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from store.settings import Settings

if TYPE_CHECKING:
    from flask import Flask
    from opentelemetry.sdk.trace.sampling import Sampler
    from opentelemetry.trace import Span, Tracer
    from sqlalchemy import Engine

PREFIX = "skillfleet."
# Requests whose spans would be noise: the health check and the metrics scrape.
UNTRACED_PATHS = "/api/health$,/metrics$"
# Header attributes an operator's OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_* could add that
# carry credentials.
SECRET_HEADERS = ("authorization", "cookie", "proxy-authorization", "x-api-key")

_tracer: Tracer | None = None
_skipped: tuple[str, ...] = ()  # instrumentations OTEL_PYTHON_DISABLED_INSTRUMENTATIONS names
_engine_traced = False


def enabled() -> bool:
    """Whether this process sends traces."""
    return _tracer is not None


class _Off:
    """What `span` gives when traces are off: a context that does nothing."""

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def note(self, **attributes: object) -> None:
        return None


OFF = _Off()


class _On:
    """A span of ours, current while the context is entered; an error ends it by type alone."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self.token: object = None

    def __enter__(self) -> _On:
        from opentelemetry import context, trace

        self.token = context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        if kind is not None:
            self.span.set_status(Status(StatusCode.ERROR, kind.__name__))
        self.span.end()
        context.detach(self.token)  # type: ignore[arg-type]

    def note(self, **attributes: object) -> None:
        self.span.set_attributes(named(attributes))


def named(attributes: Mapping[str, object]) -> dict[str, Any]:
    """skillfleet's attributes by their span names; None values are left out."""
    return {
        PREFIX + key: value if isinstance(value, str | int | float | bool) else str(value)
        for key, value in attributes.items()
        if value is not None
    }


def span(name: str, **attributes: object) -> _On | _Off:
    """A span of ours named `name` (a child of the current one) as a context manager; `note`
    adds attributes to it. Free when traces are off."""
    if _tracer is None or unsampled():
        return OFF
    return _On(_tracer.start_span(name, attributes=named(attributes)))


def note(**attributes: object) -> None:
    """Add skillfleet's attributes to the current span."""
    if _tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(named(attributes))


def unsampled() -> bool:
    """Whether the current span is in a trace the sampler dropped (a call whose trace is not
    kept): every span under it would be dropped too."""
    if _tracer is None:
        return False
    from opentelemetry import trace

    found = trace.get_current_span().get_span_context()
    return found.is_valid and not found.trace_flags.sampled


@contextmanager
def quiet_if_unsampled() -> Iterator[None]:
    """Within a dropped trace, the instrumentations do nothing: they would each make a span
    only to drop it, and that work, not the recording, was most of what traces cost a call
    (docs/benchmarks.md). A trace that is kept, or no trace at all, is left as it is."""
    if not unsampled():
        yield
        return
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    with suppress_instrumentation():
        yield


def carrier() -> dict[str, str]:
    """The current trace context as W3C Trace Context headers ({} when traces are off)."""
    if _tracer is None:
        return {}
    from opentelemetry import propagate

    found: dict[str, str] = {}
    propagate.inject(found)
    return found


@contextmanager
def joined(
    carried: Mapping[str, str], name: str, start_ns: int | None, **attributes: object
) -> Iterator[_On | _Off]:
    """A span of ours in the trace `carried` names (from `start_ns`, nanoseconds since the
    epoch), linked to the current span and current while the context is entered: work that
    goes on later, elsewhere, in the trace of what started it."""
    if _tracer is None:
        yield OFF
        return
    from opentelemetry import propagate, trace

    here = trace.get_current_span().get_span_context()
    links = [trace.Link(here)] if here.is_valid else []
    started = _tracer.start_span(
        name,
        context=propagate.extract(dict(carried)),
        links=links,
        start_time=start_ns,
        attributes=named(attributes),
    )
    with _On(started) as on:
        yield on


def start(settings: Settings, service: str, quiet: Iterable[str] = ()) -> bool:
    """Set up traces for this process as `settings` say (once); True when they are on.

    `service` names the process when OTEL_SERVICE_NAME doesn't; spans named in `quiet` (tasks
    that run on the clock) and Redis commands and SQL statements outside any trace make no
    trace of their own.
    """
    global _tracer, _skipped
    if _tracer is not None or not settings.traces:
        return _tracer is not None
    from opentelemetry import trace
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    sampler = _sampler(settings, frozenset(quiet))
    provider = TracerProvider(sampler=sampler, resource=_resource(service))
    for exporter in _exporters(settings.traces):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    if "celery" not in settings.trace_skipped:
        CeleryInstrumentor().instrument(tracer_provider=provider)  # type: ignore[no-untyped-call]
    _skipped = settings.trace_skipped
    _tracer = provider.get_tracer("skillfleet")
    return True


def instrument_engine(engine: Engine) -> None:
    """Trace the process's database engine's statements (its first engine: a process has one)."""
    global _engine_traced
    if _tracer is None or _engine_traced or "sqlalchemy" in _skipped:
        return
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from opentelemetry.instrumentation.utils import unwrap
    from sqlalchemy.engine.base import Engine as Engines

    # No sqlcommenter: statements stay as written, and so do their spans. The instrumentation
    # declares SQLAlchemy below 2.1 but uses only its engine events, which 2.1 keeps (the
    # fleet's traces test sees its spans), so its version check is skipped.
    SQLAlchemyInstrumentor().instrument(engine=engine, enable_commenter=False, skip_dep_check=True)
    # Its `connect` span, a connection taken from the pool in every transaction, says nothing
    # the statements after it don't; the wrapper that starts it goes, and with it its cost
    # (some 30 µs a transaction, dropped span or not). The statements' spans come from the
    # engine's events, which stay.
    unwrap(Engines, "connect")
    _engine_traced = True


def instrument_redis(client: object) -> None:
    """Trace the commands of one of skillfleet's Redis clients (relay/connections.py makes
    them all, sync and asyncio). The Celery transport's own connections stay untraced: its
    publish and its task are the Celery instrumentation's spans already, and wrapping every
    Redis client of the process would add a span to each call's trace for the publish and
    a dropped one for each message the worker takes and acknowledges."""
    if _tracer is None or "redis" in _skipped:
        return
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    RedisInstrumentor.instrument_client(client)  # type: ignore[arg-type]


def instrument_app(app: Flask) -> None:
    """Trace the API's requests. Called before any other hook is added: its request span
    starts first, so requests that a later hook answers (401, 404) have theirs too."""
    if _tracer is None or "flask" in _skipped:
        return
    from opentelemetry.instrumentation.flask import FlaskInstrumentor

    FlaskInstrumentor.instrument_app(  # type: ignore[no-untyped-call]
        app, excluded_urls=UNTRACED_PATHS, enable_commenter=False
    )
    app.before_request(scrub_request)
    app.before_request(_quiet_unless_kept)
    # Flask runs teardowns last registered first: this one before the instrumentation's, so
    # the contexts are left in the order they were entered.
    app.teardown_request(_end_quiet)


_QUIET = "skillfleet_trace_quiet"


def _quiet_unless_kept() -> None:
    """A request whose trace the sampler dropped runs with the instrumentations quiet (see
    `quiet_if_unsampled`); its trace context still goes with the task it sends."""
    if not unsampled():
        return
    from flask import g
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    quiet = suppress_instrumentation()
    quiet.__enter__()
    setattr(g, _QUIET, quiet)


def _end_quiet(_error: BaseException | None) -> None:
    from flask import g

    quiet = g.pop(_QUIET, None)
    if quiet is not None:
        quiet.__exit__(None, None, None)


def scrub_request() -> None:
    """The request's span without query values (a `?cursor=`, a `?wait=`) or credentials:
    the query's names are kept, as the request log keeps them. A Flask hook that runs right
    after the instrumentation's, which set them."""
    from flask import request
    from opentelemetry import trace

    current = trace.get_current_span()
    if not current.is_recording():
        return
    if request.query_string:
        query = parse_qsl(request.query_string.decode(errors="replace"))
        current.set_attribute("url.query", "&".join(dict.fromkeys(key for key, _ in query)))
        current.set_attribute("http.target", request.path)
        current.set_attribute("url.path", request.path)
        url = request.base_url  # the request's URL without its query, worked out once
        current.set_attribute("http.url", url)
        current.set_attribute("url.full", url)
    attributes = getattr(current, "attributes", None) or {}
    for header in SECRET_HEADERS:
        key = f"http.request.header.{header}"
        if key in attributes:
            current.set_attribute(key, ["[redacted]"])


def _resource(service: str) -> Any:
    """OTEL_SERVICE_NAME's and OTEL_RESOURCE_ATTRIBUTES' resource, named `service` when they
    name none."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    return resource


def _exporters(names: Iterable[str]) -> list[Any]:
    exporters: list[Any] = []
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        else:
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
    return exporters


def _sampler(settings: Settings, quiet: frozenset[str]) -> Sampler:
    from opentelemetry.sdk.trace import sampling

    ratio = settings.trace_sampler_ratio
    roots: dict[str, sampling.Sampler] = {
        "always_on": sampling.ALWAYS_ON,
        "always_off": sampling.ALWAYS_OFF,
        "traceidratio": sampling.TraceIdRatioBased(ratio),
    }
    name = settings.trace_sampler
    chosen = roots.get(name.removeprefix("parentbased_"), sampling.ALWAYS_ON)
    follows_parent = name.startswith("parentbased_")
    if follows_parent:
        chosen = sampling.ParentBased(chosen)
    from store.tracesampler import InTraces

    return InTraces(chosen, quiet, follows_parent)
