"""Reading one web page for read_web_page: public addresses only, bounded in size and time.

Every request goes through an `Egress` client (store/egress.py): the host is resolved once, the
connection goes to an address that was checked, and loopback, private, link-local and metadata
addresses are refused before anything connects. Redirects are followed here, not by httpx, so
each hop's URL passes the same rules as the one the agent sent (`webtools.web_target`) before
its host is checked and reached.

The body is read as a stream and refused past MAX_WEB_PAGE_BYTES (after any Content-Encoding
is undone, so a compressed bomb stops there too). The whole call, redirects included, is one
deadline of WEB_PAGE_SECONDS that the egress client holds every connect, header and body byte
to (store/deadlines.py): a site trickling its headers can't hold a read past it.

HTML becomes text with its headings, list items and paragraphs on lines of their own; plain
text, Markdown and JSON come back as they are; anything else is refused.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from broker.errors import BrokerError
from broker.results import json_size
from store.deadlines import Deadline
from store.egress import Egress, EgressRefused, read_at_most
from store.limits import (
    MAX_WEB_PAGE_BYTES,
    MAX_WEB_REDIRECTS,
    WEB_CONTENT_BYTES,
    WEB_PAGE_SECONDS,
    WEB_PAGES_AT_ONCE,
)

if TYPE_CHECKING:
    from bs4 import BeautifulSoup

USER_AGENT = "skillfleet-read-web-page/1"
ACCEPT = "text/html, application/xhtml+xml, text/plain, text/markdown, application/json;q=0.9"
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown", "application/json"})
# Elements whose text a reader never sees.
HIDDEN = ("script", "style", "noscript", "template", "svg", "iframe", "object", "head")
# Elements that start a line of their own; headings and list items get a Markdown marker.
BLOCKS = (
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "blockquote",
    "pre", "table", "tr", "ul", "ol", "dl", "dt", "dd", "figure", "figcaption", "form", "hr",
)  # fmt: skip
MARKERS = {"h1": "# ", "h2": "## ", "h3": "### ", "h4": "#### ", "h5": "##### ", "h6": "###### "}
MAX_TITLE_CHARS = 300
_SPACES = re.compile(r"[ \t\f\v\u00a0]+")


class WebPageError(BrokerError):
    """Raised when a page can't be read; the message says why, for the agent."""

    code = "web_page_failed"
    status = 502


class AddressRefused(WebPageError):
    """Raised when a URL or a redirect leads to an address that is not public."""

    code = "web_address_refused"
    status = 403


class PageTimeout(WebPageError):
    """Raised when the page was not read within WEB_PAGE_SECONDS."""

    code = "web_timeout"
    status = 504


class PageTooLarge(WebPageError):
    """Raised when the page's body is over MAX_WEB_PAGE_BYTES."""

    code = "web_page_too_large"
    status = 413


class ContentTypeRefused(WebPageError):
    """Raised when the page is not HTML, plain text, Markdown or JSON."""

    code = "web_content_type"
    status = 415


class HttpStatusError(WebPageError):
    """Raised when the server answers 4xx or 5xx."""

    code = "web_http_error"
    status = 502


class TooManyRedirects(WebPageError):
    """Raised when a page redirects more than MAX_WEB_REDIRECTS times."""

    code = "web_too_many_redirects"
    status = 502


class ReadersBusy(WebPageError):
    """Raised when this process already reads as many pages as it may at once."""

    code = "web_busy"
    status = 429


class PageUnreachable(WebPageError):
    """Raised when the host can't be connected to or the connection breaks."""

    code = "web_unreachable"
    status = 502


@dataclass(frozen=True)
class PageLimits:
    """What one read may take; tests shrink them."""

    max_bytes: int = MAX_WEB_PAGE_BYTES
    seconds: float = WEB_PAGE_SECONDS
    at_once: int = WEB_PAGES_AT_ONCE
    redirects: int = MAX_WEB_REDIRECTS
    content_bytes: int = WEB_CONTENT_BYTES


def read_page(
    egress: Egress,
    url: str,
    check: Callable[[str], str],
    limits: PageLimits = PageLimits(),  # noqa: B008 - frozen, shared safely
) -> dict[str, Any]:
    """The page at `url` as `{"url", "status", "title"?, "content", "truncated"?}`.

    `check` applies the URL rules to each redirect's target and returns the URL to request.
    """
    deadline = Deadline.after(limits.seconds)
    headers = {"User-Agent": USER_AGENT}
    try:
        with egress.client(deadline, follow_redirects=False, headers=headers) as client:
            return _follow(client, url, check, limits)
    except EgressRefused as e:
        raise AddressRefused(f"HOST: {e.message}") from e
    except httpx.TimeoutException as e:
        raise PageTimeout(
            f"HOST: {url} was not read within {limits.seconds:g} seconds; try again later."
        ) from e
    except httpx.HTTPError as e:
        raise PageUnreachable(f"HOST: {url} could not be reached ({type(e).__name__}).") from e


def _follow(
    client: httpx.Client, url: str, check: Callable[[str], str], limits: PageLimits
) -> dict[str, Any]:
    for _hop in range(limits.redirects + 1):
        request = client.build_request("GET", url, headers={"Accept": ACCEPT})
        response = client.send(request, stream=True)
        try:
            location = response.headers.get("location") if response.is_redirect else None
            if location is None:
                return _page(response, limits)
        finally:
            response.close()
        try:
            target = str(response.url.join(location))
        except httpx.InvalidURL:
            target = location  # refused by `check` with the URL rules' message
        url = check(target)
    raise TooManyRedirects(f"HOST: {url} redirected more than {limits.redirects} times.")


def _page(response: httpx.Response, limits: PageLimits) -> dict[str, Any]:
    url = str(response.url)
    if response.status_code >= 400:
        reason = f" {response.reason_phrase}" if response.reason_phrase else ""
        raise HttpStatusError(f"HOST: {url} answered {response.status_code}{reason}.")
    kind = _media_type(response)
    if kind not in HTML_TYPES and kind not in TEXT_TYPES:
        shown = kind or "no content type"
        raise ContentTypeRefused(
            f"HOST: {url} is {shown}; read_web_page reads HTML, plain text, Markdown and JSON."
        )
    body = _body(response, limits)
    charset = _known(response.charset_encoding)
    result: dict[str, Any] = {"url": url, "status": response.status_code}
    if kind in HTML_TYPES:
        title, text = html_text(body, charset)
        if title:
            result["title"] = title
    else:
        text = body.decode(charset or "utf-8", errors="replace")
    content, cut = capped(text, limits.content_bytes)
    result["content"] = content
    if cut:
        result["truncated"] = True
    return result


def _known(charset: str | None) -> str | None:
    """The page's charset when Python has a codec for it; None reads UTF-8 (or, for HTML,
    what the page itself declares)."""
    try:
        return codecs.lookup(charset).name if charset else None
    except LookupError:
        return None


def _media_type(response: httpx.Response) -> str:
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    return "application/json" if kind.endswith("+json") else kind


def _body(response: httpx.Response, limits: PageLimits) -> bytes:
    """The decoded body, refused as soon as it is known to be over the limit."""
    body = read_at_most(response, limits.max_bytes)
    if body is None:
        raise PageTooLarge(_too_large(str(response.url), limits))
    return body


def _too_large(url: str, limits: PageLimits) -> str:
    most = f"{limits.max_bytes // 1024} KiB"
    return f"HOST: {url} is larger than {most}, the most read_web_page reads."


def html_text(body: bytes, charset: str | None) -> tuple[str | None, str]:
    """The page's title and its visible text, one block per line."""
    # Imported here: only a process that reads a page needs the parser (0.2 s to import).
    from bs4 import BeautifulSoup
    from bs4.element import Tag

    soup = BeautifulSoup(body, "html.parser", from_encoding=charset)
    title = _title(soup)
    for hidden in soup.find_all(HIDDEN):
        hidden.decompose()
    for tag in soup.find_all(["br", *BLOCKS, "li", *MARKERS]):
        assert isinstance(tag, Tag)
        if tag.name == "br":
            tag.replace_with("\n")
            continue
        if tag.name == "li":  # the next item, or the list's end, ends its line
            tag.insert_before("\n- ")
            continue
        tag.insert_before("\n" + MARKERS.get(tag.name, ""))
        tag.insert_after("\n")
    return title, tidy(soup.get_text())


def _title(soup: BeautifulSoup) -> str | None:
    found = soup.find("title")
    if found is None:
        return None
    title = _SPACES.sub(" ", found.get_text()).strip()
    return title[:MAX_TITLE_CHARS] or None


def tidy(text: str) -> str:
    """Runs of spaces made one, lines stripped, at most one empty line in a row."""
    lines = [_SPACES.sub(" ", line).strip() for line in text.splitlines()]
    kept: list[str] = []
    for line in lines:
        if line or (kept and kept[-1]):
            kept.append(line)
    return "\n".join(kept).strip()


def capped(text: str, cap: int) -> tuple[str, bool]:
    """`text` cut so its JSON string takes at most `cap` bytes; whether it was cut."""
    if json_size(text) <= cap:
        return text, False
    cut = text.encode()[:cap].decode(errors="ignore")
    while (over := json_size(cut) - cap) > 0:
        cut = cut[:-over]  # every character takes at least one byte
    return cut, True
