"""read_web_page: the web tier's tool, granted per host.

A call's grant key is `host:<host>`: the URL's host in lowercase, internationalised names in
their IDNA (punycode) form, IPv6 addresses in brackets, without a trailing dot and without the
port. So a grant for a host covers every page, port and scheme on it, and nothing under it:
`docs.example.com` is not `example.com`.

The URL is read once, in the plan step (broker/classify.py), before the policy: a URL that can
only fail (not http or https, no host, user info, over MAX_WEB_URL_CHARS, spaces or control
characters, an address or local name that may never be reached) fails there and no owner is
asked about it. A granted call's name is resolved only when the page is read
(broker/webpages.py); a call the policy would put to the owner has its name resolved first
(`before_asking`), so a name that resolves to nothing, or to an address that may never be
reached, fails instead of being asked about. Every redirect's target passes these rules again.
"""

from __future__ import annotations

import contextlib
import threading
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from broker.context import ToolContext
from broker.errors import InvalidCall
from broker.grants import host_key
from broker.registry import Tool
from broker.tiers import Tier
from broker.webpages import AddressRefused, PageLimits, ReadersBusy, read_page
from store.egress import Egress, EgressRefused
from store.limits import MAX_WEB_URL_CHARS

READ_WEB_PAGE = "read_web_page"
LOOKUPS_AT_ONCE = 8  # host names resolved at once per process before asking their owner
LOOKUP_WAIT_SECONDS = 5.0
SCHEMES = ("http", "https")
# How messages name the URL they refuse.
URL = "the URL"
REDIRECT = "the redirect target"


class InvalidUrl(InvalidCall):
    """Raised when read_web_page is given a URL it may never request."""

    code = "invalid_url"


@dataclass(frozen=True)
class WebTarget:
    """A URL that passed the rules, and the host its grant key names."""

    url: str
    host: str

    @property
    def grant_key(self) -> str:
        return host_key(self.host)


@dataclass(frozen=True)
class PageReader:
    """The read_web_page handler, with the hosts it may reach (SKILLFLEET_EGRESS_ALLOW)."""

    egress: Egress = field(default_factory=Egress)
    limits: PageLimits = field(default_factory=PageLimits)
    reading: threading.BoundedSemaphore = field(init=False)
    looking_up: threading.BoundedSemaphore = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reading", threading.BoundedSemaphore(self.limits.at_once))
        object.__setattr__(self, "looking_up", threading.BoundedSemaphore(LOOKUPS_AT_ONCE))

    def target(self, arguments: dict[str, Any]) -> WebTarget:
        """The call's URL, checked without asking DNS; InvalidUrl or AddressRefused if it
        could only fail."""
        url = arguments.get("url")
        if not isinstance(url, str) or not url:
            raise InvalidUrl(
                "HOST: 'url' must be an http or https URL, such as https://example.com/."
            )
        return self._checked(url, URL)

    def before_asking(self, arguments: dict[str, Any]) -> None:
        """Resolve the call's host before its owner is asked: AddressRefused when it resolves
        to nothing or to an address that may never be reached. At most LOOKUPS_AT_ONCE names
        are looked up at once (a call waits LOOKUP_WAIT_SECONDS for its turn, then fails
        `web_busy`), so calls about ungranted hosts can't hold every request thread in DNS."""
        url = self.target(arguments).url
        if not self.looking_up.acquire(timeout=LOOKUP_WAIT_SECONDS):
            raise ReadersBusy(
                f"HOST: {LOOKUPS_AT_ONCE} host names are being looked up already; "
                "try again shortly."
            )
        try:
            self.egress.check_url(url, lookup=True)
        except EgressRefused as e:
            raise AddressRefused(f"HOST: {e.message}") from e
        finally:
            self.looking_up.release()

    def __call__(self, context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
        url = self.target(arguments).url
        with self._reader():
            return read_page(self.egress, url, self._redirect, self.limits)

    @contextlib.contextmanager
    def _reader(self) -> Iterator[None]:
        if not self.reading.acquire(blocking=False):
            raise ReadersBusy(
                f"HOST: {self.limits.at_once} pages are being read already; try again shortly."
            )
        try:
            yield
        finally:
            self.reading.release()

    def _redirect(self, url: str) -> str:
        return self._checked(url, REDIRECT).url

    def _checked(self, url: str, what: str) -> WebTarget:
        target = web_target(url, what)
        try:
            self.egress.check_url(target.url, lookup=False)
        except EgressRefused as e:
            said = e.message if what == URL else f"{what} is refused: {e.message}"
            raise AddressRefused(f"HOST: {said}") from e
        return target


def web_target(url: str, what: str = URL) -> WebTarget:
    """`url` with its fragment dropped and its host in key form, if it may be requested at all.

    `what` names the URL in messages: the call's URL, or a redirect's target.
    """
    if len(url) > MAX_WEB_URL_CHARS:
        raise InvalidUrl(
            f"HOST: {what} has {len(url)} characters; the most is {MAX_WEB_URL_CHARS}."
        )
    shown = f"{what} {url[:200]!r}"
    if any(_unsafe(char) for char in url):
        raise InvalidUrl(f"HOST: {shown} holds spaces or control characters; percent-encode them.")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it checks it
        parsed = httpx.URL(url)
    except (ValueError, httpx.InvalidURL):
        raise InvalidUrl(f"HOST: {shown} is not a URL that can be requested.") from None
    if parts.scheme.lower() not in SCHEMES:
        raise InvalidUrl(f"HOST: {shown} is not an http or https URL.")
    if not parts.hostname or not parsed.raw_host:
        raise InvalidUrl(f"HOST: {shown} names no host.")
    if "@" in parts.netloc:
        raise InvalidUrl(f"HOST: {shown} holds user info (name@); give the URL without it.")
    host = parsed.raw_host.decode("ascii").rstrip(".").lower()
    if ":" in host:
        host = f"[{host}]"
    return WebTarget(str(parsed.copy_with(fragment=None)), host)


def bare_host(text: str) -> str | None:
    """`text` as a grant key writes it, when it is a bare host name or address (no scheme,
    user info, port or path); None otherwise. Owner settings take hosts this way."""
    if not text or any(char in text for char in "/?#@\\") or text.count(":") == 1:
        return None
    try:
        return web_target(f"http://{text}/").host
    except InvalidUrl:
        return None


def _unsafe(char: str) -> bool:
    """Whitespace, a control character (C0, DEL, C1) or another invisible format character."""
    return char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")


def tools(egress: Egress | None = None) -> tuple[Tool, ...]:
    """The web tools, reaching public hosts and those `egress` allows."""
    reader = PageReader(egress or Egress())
    return (
        Tool(
            READ_WEB_PAGE,
            Tier.WEB,
            "Reads one public web page (http or https) and returns its text: HTML as text, "
            "plain text, Markdown and JSON as they are. Each host needs the owner's grant, "
            "unless a skill loaded in this chat lists it in its allowed domains.",
            {
                "type": "object",
                "properties": {
                    "url": {
                        "type": "string",
                        "description": "The page's URL, such as https://example.com/docs.",
                        "maxLength": MAX_WEB_URL_CHARS,
                    }
                },
                "required": ["url"],
                "additionalProperties": False,
            },
            reader,
        ),
    )
