"""Whether a script reaches the network, as the review warnings read it.

A call that reaches out (`curl`, `requests.get(`, `fetch(`, a TCP socket) counts wherever it
is. A URL counts only where code can use it: in a string of the code (not a comment, not a
Python docstring), naming a host that serves something. XML namespaces and other identifiers
written as URLs (`http://schemas.openxmlformats.org/…`, `http://www.w3.org/…`, an `xmlns`
attribute, ElementTree's `{uri}tag`) are names that nothing fetches, and don't count.
"""

from __future__ import annotations

import ast
import re
from pathlib import PurePosixPath

# Calls that reach the network from a script, by what a reader would search for. A socket of
# the AF_UNIX family is a local one.
_CALLS = re.compile(
    r"\b(?:curl|wget|nc|ssh|scp|rsync)\s|\brequests\.\w+\(|\burllib\.request\b|\bhttpx\b"
    r"|\bhttp\.client\b|\bsocket\.socket\((?!\s*(?:socket\.)?AF_UNIX)|\bfetch\(|\baiohttp\b"
    r"|\bInvoke-WebRequest\b|\bHttpClient\b",
)
_URL = re.compile(r"https?://([A-Za-z0-9.-]+)")
# Written right before a URL that is a namespace's name: an xmlns attribute, Clark notation.
_NAMESPACE_LEAD = re.compile(r"(?:xmlns(?::[\w.-]+)?\s*=\s*\\?[\"']|\{)$")
# Authorities whose URLs name XML namespaces, schemas and vocabularies rather than pages a
# script fetches (a name and its subdomains).
NAMESPACE_HOSTS = frozenset(
    {
        "schemas.openxmlformats.org", "schemas.microsoft.com", "w3.org", "purl.org",
        "purl.oclc.org", "openoffice.org", "ns.adobe.com", "schemas.xmlsoap.org", "xmlns.com",
        "opengis.net", "schemas.android.com", "java.sun.com", "xmlns.jcp.org",
        "json-schema.org", "schema.org", "relaxng.org", "docbook.org", "ns.google.com",
    }
)  # fmt: skip
_COMMENT_LINE = re.compile(r"^\s*(?:#|//)")


def network_use(path: str, text: str) -> str | None:
    """What in `text` reaches the network (the call, or the URL), or None."""
    call = _CALLS.search(text)
    if call is not None:
        return call.group()
    for literal in _code_strings(path, text):
        for found in _URL.finditer(literal):
            if not _names_only(found.group(1)) and not _NAMESPACE_LEAD.search(
                literal[: found.start()]
            ):
                return found.group()
    return None


def _names_only(host: str) -> bool:
    """Whether `host` is an authority of namespace and schema names (or a subdomain of one)."""
    labels = host.lower().rstrip(".").split(".")
    return any(".".join(labels[i:]) in NAMESPACE_HOSTS for i in range(len(labels)))


def _code_strings(path: str, text: str) -> list[str]:
    """The parts of a script where code can hold a URL: a Python script's string constants
    but its docstrings; any other script's lines but whole-line comments."""
    if PurePosixPath(path).suffix.lower() == ".py":
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return [text]  # the syntax check reports it; read it whole meanwhile
        return _python_strings(tree)
    return ["\n".join(line for line in text.splitlines() if not _COMMENT_LINE.match(line))]


def _python_strings(tree: ast.AST) -> list[str]:
    """Every string constant of the tree but those standing alone as statements (docstrings)."""
    standalone = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in standalone
    ]  # fmt: skip
