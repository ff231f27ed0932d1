"""The MCP gateway: the owner's tools and skills for any MCP host, through the REST API.

One gateway (`api/mcp/gateway.py`) serves both ways in. It is a client of the REST tool routes
(`api/mcp/rest.py`), so every call passes every rule of the REST path: authentication, the
broker, limits, recording, waits and run events. `skillfleet mcp` reaches the API over the
network and speaks MCP over stdio; `/mcp` (`api/mcp/http.py`) speaks streamable HTTP on the
API's own port and reaches the same app in this process (`api/mcp/inprocess.py`), with the
caller's own token. The skills are resources and Skills-extension manifests too
(`api/mcp/skills.py`), read through the same routes.
"""
