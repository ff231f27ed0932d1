"""Role checks that come before a view's arguments are read.

flask-smorest reads a view's body and query (`@blp.arguments`), and `api.paging.keyset` its
page (`@keyset`), before the view runs, so a check made inside the view comes after them: an
agent token sending `{}` to an owner-only route would learn what the body lacks (422) instead
of being refused (403). Placed between `@blp.route` and those decorators, `owner_route`
refuses it first, whatever it sent.
What each token may do is still decided in one place, api/auth.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from api.auth import owner_only

P = ParamSpec("P")
R = TypeVar("R")


def owner_route(view: Callable[P, R]) -> Callable[P, R]:
    """The view, refusing every token but the owner's own (403 `owner_only`) before it reads
    anything of the request."""

    @functools.wraps(view)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        owner_only()
        return view(*args, **kwargs)

    return checked
