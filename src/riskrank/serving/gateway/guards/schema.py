"""``invalid_arguments``: the arguments do not match the tool's ``inputSchema`` (JSON Schema;
the message says where and what), refused before a confirmation is asked and before the
upstream is called. A schema that is not valid JSON Schema itself judges nothing: the
upstream does."""

from __future__ import annotations

from typing import Any

from riskrank.serving.gateway.guards.chain import REFUSE, CallContext, Guard, Verdict

INVALID_ARGUMENTS = "invalid_arguments"


def argument_problem(schema: dict[str, Any] | None, args: dict[str, Any]) -> str | None:
    """Why ``args`` do not match a tool's ``inputSchema`` (one line: where and what), or None."""
    if not schema:
        return None
    import jsonschema
    import referencing.exceptions

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        error = jsonschema.exceptions.best_match(cls(schema).iter_errors(args))
    except (jsonschema.exceptions.SchemaError, referencing.exceptions.Unresolvable, RecursionError, TypeError,
            ValueError, LookupError):
        return None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the arguments"
    message = " ".join(error.message.split())
    return f"at {where}: {message if len(message) <= 200 else message[:199] + '…'}"


def check(ctx: CallContext) -> Verdict | None:
    problem = argument_problem(ctx.view.schemas.get(ctx.tool), dict(ctx.arguments))
    if problem is None:
        return None
    return Verdict(REFUSE, INVALID_ARGUMENTS, f"the arguments of {ctx.tool!r} do not match its input_schema: {problem}")


GUARD = Guard("schema", check)
