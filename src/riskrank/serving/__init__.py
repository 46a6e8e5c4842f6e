"""The surfaces that serve a catalogue to agents: the HTTP API (:mod:`.http`), the MCP server
and gateway (:mod:`.mcp`; its parts in :mod:`.gateway`, the SDK layer :mod:`.mcp_compat`), and
what they share: the request contract (:mod:`.requests`), the bearer-token gate and bind rules
(:mod:`.auth`) and the listening socket (:mod:`.listen`).

HTTP and MCP stand on :mod:`riskrank.catalogue` and never import each other. Each imports
its optional dependencies when it is imported (``pip install 'riskrank[serve]'``,
``'riskrank[mcp]'``); this package itself imports nothing heavy.
"""
