"""Methods a route does not take: 405 with `Allow`, before the body or the token is read.

Flask finds a route's methods while matching the URL and raises the 405 only when it would
call the view, after every `before_request` hook: a TRACE without a token would get 401, a PUT
with a form body 415. What a route takes is public (the OpenAPI document lists it), and no body
or token can make a method it lacks work, so the answer comes first, the same for everyone.
"""

from __future__ import annotations

from flask import Flask, request
from werkzeug.exceptions import MethodNotAllowed


def install_method_check(app: Flask) -> None:
    """Refuse an undeclared method before the other hooks; call before installing them."""
    app.before_request(refuse_undeclared_method)


def refuse_undeclared_method() -> None:
    if isinstance(request.routing_exception, MethodNotAllowed):
        raise request.routing_exception
