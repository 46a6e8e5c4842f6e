"""The call path as a chain of guards: each decision about one ``call_tool`` is a small pure
guard over one :class:`~.chain.CallContext`, in one module, run in a fixed order by one
:class:`~.chain.Chain` whose record is the audit line's ``guards``.

The order (the first refusal decides; holds add up into one question):

1. :mod:`.bounds`: ``arguments_too_large`` (before anything reads them; then frozen);
2. :mod:`.trust`: ``quarantined``, ``poisoned`` (shown or not);
3. :mod:`.withdrawn`: ``withdrawn``;
4. :mod:`.upstream`: ``upstream_down`` (shown, but its server is not running);
5. :mod:`.unknown`: ``unknown_tool`` (no search can return it);
6. :mod:`.policy`: ``denied_by_policy``, ``above_max_level``, ``not_exposed``;
7. :mod:`.schema`: ``invalid_arguments``;
8. :mod:`.session`: ``session_unavailable`` (the session's record cannot be read);
9. :mod:`.scope`: a risky tool outside the session's scope is held (drift);
10. :mod:`.flow`: a sink carrying an untrusted value is held (or ``untrusted_value``);
11. :mod:`.confirm`: ``confirm_level``, an untrusted server, a scan verdict: held, once per session.

Trust comes before exposure because a quarantined tool is refused with its reason whether or
not a search showed it, and a shown tool whose server is down is ``upstream_down`` before the
policy judges a level its catalogue no longer has. Adding a guard is one module with a
``GUARD`` and its place in :data:`ORDER`.
"""

from __future__ import annotations

from riskrank.serving.gateway.guards import (
    bounds,
    confirm,
    flow,
    policy,
    schema,
    scope,
    session,
    trust,
    unknown,
    upstream,
    withdrawn,
)
from riskrank.serving.gateway.guards.chain import (
    HOLD,
    REFUSE,
    CallContext,
    Chain,
    Guard,
    Outcome,
    Verdict,
)

#: The guards, in the order they run.
ORDER: tuple[Guard, ...] = tuple(m.GUARD for m in (bounds, trust, withdrawn, upstream, unknown, policy, schema, session,
                                                  scope, flow, confirm))

__all__ = ["HOLD", "ORDER", "REFUSE", "CallContext", "Chain", "Guard", "Outcome", "Verdict"]
