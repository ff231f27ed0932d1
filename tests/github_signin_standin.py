"""A local HTTP server that answers like GitHub's OAuth device flow and the few REST routes a
sign-in reads, for sign-in tests.

Speaks what GitHub documents: POST /login/device/code; POST /login/oauth/access_token for the
device grant (200 with `error` authorization_pending, slow_down, expired_token, access_denied,
incorrect_device_code) and the refresh grant (tokens rotate: a refresh token works once,
bad_refresh_token after); GET /user and GET /orgs/<org>/members/<login> (204 or 404) with the
user's bearer token. A test plays the person at the browser: `enter(code, user_id)` is the
person entering the code and pressing Authorize, `deny(code)` pressing Cancel.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

CLIENT_ID = "Iv1.standin0client"
CLIENT_SECRET = "standin-secret"
USERS = {583231: "octocat", 9919: "mona", 4242: "hubot"}
ORGS = {"acme": {"mona"}}


@dataclass
class Code:
    device_code: str
    user_code: str
    expires: float
    interval: int
    last_poll: float = 0.0
    user_id: int | None = None
    denied: bool = False
    spent: bool = False
    slow_downs: int = 0  # the next polls answered slow_down whatever their timing


@dataclass
class Token:
    user_id: int
    expires: float | None


@dataclass
class Poll:
    at: float
    answer: str


class StandIn(ThreadingHTTPServer):
    codes: dict[str, Code]
    tokens: dict[str, Token]
    refresh_tokens: dict[str, int]
    polls: list[Poll]
    requests: list[str]
    # What the stand-in gives: the interval and life of a code, the life of an access token
    # (None: an OAuth app's, which never expires and comes without a refresh token).
    interval: int
    code_seconds: int
    token_seconds: int | None
    slow_down_step: int
    slow_down_says_interval: bool
    users: dict[int, str]
    orgs: dict[str, set[str]]
    lock: threading.Lock
    broken: bool  # every answer a 500, as GitHub in an outage

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def code(self, user_code: str) -> Code:
        with self.lock:
            return next(code for code in self.codes.values() if code.user_code == user_code)

    def enter(self, user_code: str, user_id: int) -> None:
        """The person enters the code on GitHub signed in as `user_id` and authorizes."""
        self.code(user_code).user_id = user_id

    def deny(self, user_code: str) -> None:
        self.code(user_code).denied = True

    def expire_token(self, access_token: str) -> None:
        with self.lock:
            self.tokens[access_token].expires = time.time() - 1

    def answers(self) -> list[str]:
        with self.lock:
            return [poll.answer for poll in self.polls]


def _device_code(server: StandIn, form: dict[str, str]) -> tuple[int, dict[str, object]]:
    if form.get("client_id") != CLIENT_ID:
        return 200, {"error": "incorrect_client_credentials", "error_description": "bad id"}
    code = Code(
        device_code=secrets.token_hex(20),
        user_code=f"{secrets.randbelow(10**4):04d}-{secrets.randbelow(10**4):04d}",
        expires=time.time() + server.code_seconds,
        interval=server.interval,
    )
    with server.lock:
        server.codes[code.device_code] = code
    return 200, {
        "device_code": code.device_code,
        "user_code": code.user_code,
        "verification_uri": f"{server.base_url}/login/device",
        "expires_in": server.code_seconds,
        "interval": code.interval,
    }


def _issue(server: StandIn, user_id: int) -> dict[str, object]:
    access = "ghu_" + secrets.token_hex(16)
    answer: dict[str, object] = {"access_token": access, "token_type": "bearer", "scope": ""}
    expires = None
    if server.token_seconds is not None:
        expires = time.time() + server.token_seconds
        refresh = "ghr_" + secrets.token_hex(16)
        server.refresh_tokens[refresh] = user_id
        answer.update(
            expires_in=server.token_seconds,
            refresh_token=refresh,
            refresh_token_expires_in=15_811_200,
        )
    server.tokens[access] = Token(user_id, expires)
    return answer


def _device_grant(server: StandIn, form: dict[str, str]) -> dict[str, object]:
    now = time.time()
    with server.lock:
        code = server.codes.get(form.get("device_code", ""))
        if code is None or code.spent:
            answer: dict[str, object] = {"error": "incorrect_device_code"}
        elif now >= code.expires:
            answer = {"error": "expired_token"}
        elif code.slow_downs or now - code.last_poll < code.interval:
            code.slow_downs = max(0, code.slow_downs - 1)
            code.interval += server.slow_down_step
            answer = {"error": "slow_down"}
            if server.slow_down_says_interval:
                answer["interval"] = code.interval
        elif code.denied:
            answer = {"error": "access_denied"}
        elif code.user_id is None:
            answer = {"error": "authorization_pending"}
        else:
            code.spent = True
            answer = _issue(server, code.user_id)
        if code is not None:
            code.last_poll = now
        server.polls.append(Poll(now, str(answer.get("error", "access_token"))))
    return answer


def _refresh_grant(server: StandIn, form: dict[str, str]) -> dict[str, object]:
    if form.get("client_secret") != CLIENT_SECRET:
        return {"error": "incorrect_client_credentials"}
    with server.lock:
        user_id = server.refresh_tokens.pop(form.get("refresh_token", ""), None)
        if user_id is None:
            return {"error": "bad_refresh_token", "error_description": "used or unknown"}
        return _issue(server, user_id)


def _token(server: StandIn, form: dict[str, str]) -> tuple[int, dict[str, object]]:
    if form.get("client_id") != CLIENT_ID:
        return 200, {"error": "incorrect_client_credentials"}
    grant = form.get("grant_type")
    if grant == "urn:ietf:params:oauth:grant-type:device_code":
        return 200, _device_grant(server, form)
    if grant == "refresh_token":
        return 200, _refresh_grant(server, form)
    return 200, {"error": "unsupported_grant_type"}


def _user_of(server: StandIn, authorization: str | None) -> int | None:
    scheme, _, access = (authorization or "").partition(" ")
    with server.lock:
        token = server.tokens.get(access) if scheme.lower() == "bearer" else None
    if token is None or (token.expires is not None and token.expires <= time.time()):
        return None
    return token.user_id


def _api(server: StandIn, path: str, authorization: str | None) -> tuple[int, object]:
    user_id = _user_of(server, authorization)
    if user_id is None:
        return 401, {"message": "Bad credentials"}
    login = server.users[user_id]
    if path == "/user":
        return 200, {"id": user_id, "login": login, "type": "User"}
    parts = path.strip("/").split("/")
    if len(parts) == 4 and parts[0] == "orgs" and parts[2] == "members":
        members = server.orgs.get(parts[1].lower(), set())
        return (204, None) if parts[3] in members and parts[3] == login else (404, None)
    return 404, {"message": "Not Found"}


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        self.server.requests.append(f"POST {path}")
        if self.server.broken:
            self._reply(500, {"message": "Server Error"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = parse_qs(self.rfile.read(length).decode())
        form = {key: values[0] for key, values in raw.items()}
        if self.headers.get("Accept") != "application/json":
            self._reply(406, {"message": "ask for application/json"})
        elif path == "/login/device/code":
            self._reply(*_device_code(self.server, form))
        elif path == "/login/oauth/access_token":
            self._reply(*_token(self.server, form))
        else:
            self._reply(404, {"message": "Not Found"})

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        self.server.requests.append(f"GET {path}")
        if self.server.broken:
            self._reply(500, {"message": "Server Error"})
            return
        self._reply(*_api(self.server, path, self.headers.get("Authorization")))

    def _reply(self, status: int, body: object) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Keeps test output quiet."""


@dataclass
class Options:
    interval: int = 1
    code_seconds: int = 900
    token_seconds: int | None = 28_800
    slow_down_step: int = 5
    slow_down_says_interval: bool = True  # GitHub sends the new interval; a client adds 5 if not
    users: dict[int, str] = field(default_factory=lambda: dict(USERS))
    orgs: dict[str, set[str]] = field(default_factory=lambda: {k: set(v) for k, v in ORGS.items()})


@contextmanager
def serve(options: Options | None = None) -> Iterator[StandIn]:
    """Run the stand-in on a free loopback port for the length of the block."""
    options = options or Options()
    server = StandIn(("127.0.0.1", 0), Handler)
    server.codes, server.tokens, server.refresh_tokens = {}, {}, {}
    server.polls, server.requests = [], []
    server.interval, server.code_seconds = options.interval, options.code_seconds
    server.token_seconds, server.slow_down_step = options.token_seconds, options.slow_down_step
    server.slow_down_says_interval = options.slow_down_says_interval
    server.users, server.orgs = options.users, options.orgs
    server.lock = threading.Lock()
    server.broken = False
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
