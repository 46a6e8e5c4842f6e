"""The operator's console (``--console``): approvals, the call log, the catalogue with a
search box, the audit's review queue, and pictures, served at ``/console`` by the process
that serves the catalogue (``riskrank serve`` or ``riskrank mcp``).

- :mod:`~riskrank.serving.console.host`: the seam, what the serving surface shows the console;
- :mod:`~riskrank.serving.console.security`: sessions, CSRF, headers, who may log in;
- :mod:`~riskrank.serving.console.calllog`: the audit log filtered, paged and exported;
- :mod:`~riskrank.serving.console.pictures`: the PNG charts;
- :mod:`~riskrank.serving.console.app`: the pages (Starlette + Jinja2, extra ``console``).

Nothing here imports another surface (the HTTP API, the MCP server) or the engine; the
surface that mounts the console hands it a :class:`~riskrank.serving.console.host.ConsoleHost`.
"""
