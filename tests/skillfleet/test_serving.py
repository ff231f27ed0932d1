"""The API's gunicorn configuration, as gunicorn itself reads it from skillfleet.serving."""

from __future__ import annotations

import gc
from typing import Any

from gunicorn.app.base import Application


class ConfigOnly(Application):  # type: ignore[misc]
    """gunicorn's application loading skillfleet's configuration module, serving nothing."""

    def load_config(self) -> None:
        self.load_config_from_module_name_or_filename("python:skillfleet.serving")

    def load(self) -> Any:
        raise AssertionError("nothing is served")


def collected(thing: object) -> bool:
    """Whether a full pass of the garbage collector would walk `thing`."""
    return any(seen is thing for seen in gc.get_objects())


def test_each_api_worker_freezes_what_it_made_while_starting() -> None:
    hook = ConfigOnly().cfg.post_worker_init  # gunicorn ignores a misspelt hook silently
    made_at_startup: list[object] = []
    assert collected(made_at_startup)
    try:
        hook(None)
        assert not collected(made_at_startup)
        made_later: list[object] = []
        assert collected(made_later)
    finally:
        gc.unfreeze()
