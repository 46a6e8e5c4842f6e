"""The gateway behind ``riskrank mcp --config``: several upstream MCP servers behind one
risk-aware ``find_tools``/``call_tool`` pair, under a call-time policy the agent cannot widen.

- :mod:`.core`: the gateway itself: ``find_tools`` and ``call_tool`` (the call's context
  through the chain of guards, then refuse, ask or forward), and the keeper that rebuilds the
  view when an upstream re-lists;
- :mod:`.view`: what is offered, one generation at a time (levels, capabilities, sources and
  sinks, routes, schemas, what trust withholds);
- :mod:`.guards`: the call path as a chain, one module per guard (bounds, trust, withdrawn,
  upstream, unknown, policy, schema, session, scope, flow, confirm);
- :mod:`.session` and :mod:`.values`: the session guard's record (the task, the scope, the
  values untrusted results brought, the approvals) and the values' one folded form;
- :mod:`.config`: the ``mcpServers`` file and the policy file, read strictly (one-line errors
  naming the file and the field);
- :mod:`.policy`: :class:`~.policy.Policy` and :func:`~.policy.decide`, the pure call-time
  decision (exposed? denied? above ``max_level``? needs confirmation?);
- :mod:`.upstreams`: :class:`~.upstreams.UpstreamManager`, which starts, watches, restarts
  and merges the upstream servers (namespaced names on collision);
- :mod:`.confirm`: confirmation: the text and digest of exactly the call that will run, and
  the brokers that ask (MCP elicitation to the user, or the operator's console);
- :mod:`.limits`: the bounds of one call (argument and answer size, depth, the timeout);
- :mod:`.auditlog`: the append-only JSONL decision log;
- :mod:`.store`: the state store replicas share (SQLite or PostgreSQL).

The MCP server that serves it is :mod:`riskrank.serving.mcp`. Only
:mod:`riskrank.serving.mcp_compat` touches the SDK.
"""
