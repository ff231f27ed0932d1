"""relay/fenced/: each piece is used by default and SKILLFLEET_FENCED_* turns it off."""

from __future__ import annotations

import dataclasses

from conftest import REDIS_URL
from kombu.transport import redis as kombu_redis_transport

from relay.app import create_celery
from relay.fenced import kombu_redis
from relay.fenced.uvicorn_http import RequestsInTime, http_protocol
from store.settings import Settings


def test_workers_use_the_fenced_kombu_transport_unless_it_is_turned_off():
    settings = Settings(redis_url=REDIS_URL)
    fenced = create_celery(settings, current=False)
    plain = create_celery(dataclasses.replace(settings, fenced_kombu=False), current=False)
    with fenced.connection_for_write() as on, plain.connection_for_write() as off:
        assert isinstance(on.transport, kombu_redis.Transport)
        assert type(off.transport) is kombu_redis_transport.Transport
        assert on.transport_options == off.transport_options  # same visibility timeout


def test_the_setting_is_read_from_the_environment():
    assert Settings.from_env({}).fenced_kombu is True
    assert Settings.from_env({"SKILLFLEET_FENCED_KOMBU": "false"}).fenced_kombu is False


def test_the_api_serves_with_the_fenced_http_protocol_unless_it_is_turned_off():
    settings = Settings(redis_url=REDIS_URL, header_timeout=7)
    fenced = http_protocol(settings)
    assert isinstance(fenced, type) and issubclass(fenced, RequestsInTime)
    assert fenced.seconds == 7
    assert http_protocol(dataclasses.replace(settings, fenced_uvicorn=False)) == "httptools"
    assert Settings.from_env({}).fenced_uvicorn is True
    assert Settings.from_env({"SKILLFLEET_FENCED_UVICORN": "false"}).fenced_uvicorn is False
