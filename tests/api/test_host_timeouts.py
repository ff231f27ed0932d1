"""The MCP approval wait returns a waiting call's pending result before the host libraries
installed here give up on it by default (docs/mcp.md, "How long a host waits"): the figures
the docs cite, read from the libraries themselves."""

from __future__ import annotations

import fastmcp
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, create_mcp_http_client
from pydantic_ai.mcp import MCPToolset

from store.settings import DEFAULT_MCP_APPROVAL_WAIT, Settings

URL = "http://127.0.0.1:9/mcp"  # never reached: only the clients' settings are read


def test_the_cited_defaults_are_the_installed_libraries_own():
    toolset = MCPToolset(URL)
    assert toolset._client_options["read_timeout"] == 300  # the whole tool call
    assert MCP_DEFAULT_SSE_READ_TIMEOUT == 300.0
    assert create_mcp_http_client().timeout.read == 300.0
    client = fastmcp.Client(URL)
    assert client._session_kwargs.get("read_timeout_seconds") is None  # no limit of its own


def test_the_approval_wait_ends_before_the_shortest_of_them_with_time_for_the_run():
    shortest = min(300.0, MCP_DEFAULT_SSE_READ_TIMEOUT)
    assert DEFAULT_MCP_APPROVAL_WAIT == 240.0
    assert Settings.from_env({}).mcp_approval_wait == DEFAULT_MCP_APPROVAL_WAIT
    assert shortest - DEFAULT_MCP_APPROVAL_WAIT >= 60  # a minute left for the approved run
