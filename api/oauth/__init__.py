"""OAuth 2.1 for MCP hosts: skillfleet as the authorization server of its own /mcp.

urls.py names the paths, routes.py serves the metadata and the MCP SDK's handlers over
provider.py, consent.py is the console's page where the owner answers. The token a host gets
is an agent token of the owner (store/oauth.py).
"""
