"""Who is calling a gateway served over streamable HTTP, and which named policy they get.

A team runs one gateway for several agents and people: a CI bot that may only read, an
on-call agent that may restart services with confirmation. Each authenticates as itself with
a token of its own, listed in the **clients file** (``--clients FILE``)::

    {"clients": {
       "ci-bot":  {"token_sha256": "sha256:9f86d0...", "policy": "read-only"},
       "on-call": {"token_sha256": ["sha256:old...", "sha256:new..."], "policy": "on-call"}},
     "oauth": {"issuer": "https://id.example.com", "audience": "https://gw.example.com/mcp",
               "jwks": "https://id.example.com/.well-known/jwks.json", "default_policy": "read-only"}}

- tokens are never stored in clear: the file holds their sha256 (``riskrank clients add``
  makes a token, prints it once and writes its digest); a list of digests is a rotation (the
  old and the new token both work until the old digest is removed);
- the file is re-read when it changes (checked at most once a second): a token is added,
  rotated or revoked without a restart. A file that no longer reads is not half-trusted: every
  client token is refused (401) until it is fixed, and the reason is logged once;
- at start, refused: duplicate names (the strict reader), a malformed digest, one token for
  two clients, a client token equal to the shared bearer token or the admin token (separate
  roles), the digest of a well-known weak token, and a policy name the policy file lacks;
- ``oauth``: OAuth 2.1 bearer JWTs from an issuer (the MCP authorization spec's
  resource-server role, :mod:`riskrank.serving.oauth`): the client is ``ISSUER#SUBJECT``
  (the issuer's URL and the token's ``client_claim``), its policy the ``policy_claim`` when
  the issuer sets one, else ``default_policy``.

One identity, one namespace: a clients-file name is letters, digits and ``_.@-``, and an
OAuth identity holds the issuer's ``://``, so the two can never be the same name, and every
key that follows a caller (its session's exposure, a confirmation's binding, the audit line,
the console) carries the whole identity. A token whose subject reads as a clients-file name
(the same after NFKC, case folding and Unicode's confusables) is refused with an audit line
(:class:`IdentityCollision`): an operator reading ``ci`` must never be reading someone else.

The name is on every audit line and console entry of the client's calls; the policy is the
one it gets, looked up by name in :class:`~riskrank.serving.gateway.config.Policies`, and no
request can name another. Standard library only (PyJWT is imported only with ``oauth``).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.fileio import atomic_write_text, loads_strict
from riskrank.names import skeleton
from riskrank.serving.auth import WEAK_DIGESTS
from riskrank.serving.auth import check_token_strength as check_strength
from riskrank.serving.gateway.config import ConfigError, Policies, check_object

#: How often the file's stat is compared at most (a rotation is live within about this).
RELOAD_EVERY_S = 1.0
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
CLIENT_KEYS = {"token_sha256", "policy"}
TOP_KEYS = {"clients", "oauth"}


def token_digest(token: str) -> str:
    """The digest a clients file holds for ``token`` (``sha256:`` and 64 hex characters)."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def check_token_strength(token: str, where: str = "the token") -> None:
    """A token a client may be given: :func:`riskrank.serving.auth.check_token_strength`,
    the rule the bearer and admin tokens meet too."""
    check_strength(token, where, ConfigError, "use `riskrank clients add` to make one")


@dataclass(frozen=True)
class Identity:
    """Who a request is: ``name`` (None: the shared bearer token, stdio or ``--insecure``;
    ``ISSUER#SUBJECT`` for an OAuth token), its ``policy`` name (None: the default policy)
    and how it authenticated."""

    name: str | None
    policy: str | None
    via: str  # "client", "oauth", "bearer", "none"

    def to_scope(self) -> dict[str, Any]:
        return {"name": self.name, "policy": self.policy, "via": self.via}


def name_looks(name: str) -> tuple[str, ...]:
    """Every way ``name`` can look to a reader of an audit line or the console: as the scan
    compares tool names across servers (:func:`riskrank.scan.name_folds`: NFKC, case folding,
    Unicode's confusables, and the ASCII look-alikes a font hides, a capital I or a 1 for an l,
    a 0 for an o), after the blanks around it are dropped (``'alice '``, ``'alice\\u3000'``).
    (:func:`riskrank.names.skeleton` alone let ``aIice``, ``a1ice`` and ``'alice '`` through.)"""
    import unicodedata

    from riskrank.scan import name_folds

    plain = unicodedata.normalize("NFKC", name).strip()
    return tuple(dict.fromkeys((*name_folds(plain), skeleton(plain))))


def oauth_identity(issuer: str, subject: str) -> str:
    """The one name of an OAuth caller: ``ISSUER#SUBJECT`` (an issuer has no ``#``, so the
    first one splits it; a clients-file name has no ``:``, so the two never meet)."""
    return f"{issuer}#{subject}"


class IdentityCollision(RiskrankError):
    """An OAuth token whose subject reads as a clients-file client's name: refused (401) and
    audited with the issuer and subject, never the token."""

    code = "unauthorized"
    reason = "identity_collision"

    def __init__(self, issuer: str, subject: str, client: str) -> None:
        super().__init__(f"the subject {subject!r} of {issuer} reads as the clients-file client {client!r}; an OAuth "
                         "identity may not shadow a client (rename one of them)")
        self.issuer, self.subject, self.client = issuer, subject, client


@dataclass(frozen=True)
class Client:
    name: str
    policy: str
    digests: tuple[str, ...]


def parse_clients(data: Any, where: str, policies: Policies, *, reserved: dict[str, str] | None = None
                  ) -> tuple[dict[str, Client], dict[str, Any] | None]:
    """The clients (name -> :class:`Client`) and the ``oauth`` object of a clients file's
    data, checked as the module docstring says. ``reserved``: digest -> role of the tokens a
    client may not share (the bearer and admin tokens)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the clients file must hold a JSON object")
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown or ("clients" not in data and "oauth" not in data):
        raise ConfigError(f"{where}: expected {{\"clients\": {{NAME: {{\"token_sha256\": ..., \"policy\": ...}}}}}}"
                          + (f" (unknown key(s) {unknown})" if unknown else ""))
    raw = data.get("clients", {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: clients: must be an object of client name -> client")
    clients: dict[str, Client] = {}
    owner: dict[str, str] = {}
    for name, entry in raw.items():
        at = f"{where}: clients.{name}"
        if not _NAME.match(name):
            raise ConfigError(f"{at}: a client name is 1 to 64 letters, digits, '_', '.', '@' or '-'")
        check_object(entry, CLIENT_KEYS, at, "an object with token_sha256 and policy",
                     "; tokens are never written in clear: use token_sha256")
        digests = entry.get("token_sha256")
        digests = [digests] if isinstance(digests, str) else digests
        if not isinstance(digests, list) or not digests:
            raise ConfigError(f"{at}: token_sha256: must be a digest \"sha256:<64 hex>\" or a list of them (a rotation)")
        for d in digests:
            m = _DIGEST.match(d) if isinstance(d, str) else None
            if m is None:
                raise ConfigError(f"{at}: token_sha256: {str(d)[:20]!r}... is not \"sha256:\" and 64 lower-case hex characters")
            if m.group(1) in WEAK_DIGESTS:
                raise ConfigError(f"{at}: token_sha256: the digest of a well-known weak token; make one with "
                                  "`riskrank clients add`")
            if d in owner:
                raise ConfigError(f"{at}: token_sha256: the same token as client {owner[d]!r} (one token, one client)")
            if reserved and d in reserved:
                raise ConfigError(f"{at}: token_sha256: the same token as the {reserved[d]} (separate roles: give the "
                                  "client a token of its own)")
            owner[d] = name
        policy = entry.get("policy")
        if not isinstance(policy, str):
            raise ConfigError(f"{at}: policy: must name a policy of the policy file ({', '.join(sorted(policies.named))})")
        if policy not in policies.named:
            raise ConfigError(f"{at}: policy: no policy named {policy!r} in the policy file "
                              f"(it has {', '.join(sorted(policies.named))})")
        clients[name] = Client(name, policy, tuple(digests))
    oauth = data.get("oauth")
    if oauth is not None:
        if not isinstance(oauth, dict):
            raise ConfigError(f"{where}: oauth: must be an object (issuer, audience, jwks, ...)")
        dp = oauth.get("default_policy", policies.default)
        if not isinstance(dp, str) or dp not in policies.named:
            raise ConfigError(f"{where}: oauth.default_policy: no policy named {dp!r} in the policy file")
    return clients, oauth


def read_clients_file(path: Path, policies: Policies, reserved: dict[str, str]) -> tuple[dict[str, Client], dict[str, Any] | None]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such clients file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the clients file: {exc}") from None
    return parse_clients(loads_strict(text, str(path), ConfigError), str(path), policies, reserved=reserved)


@dataclass
class ClientBook:
    """The clients file as the gate reads it: token digest -> client, re-read when the file
    changes (see the module docstring), and the OAuth validator when the file has ``oauth``.

    ``reserved``: the bearer and admin tokens (their digests may not be a client's);
    ``log``: where a reload's outcome and a refused JWT are written (one line each)."""

    path: Path
    policies: Policies
    reserved: dict[str, str] = field(default_factory=dict)
    log: Callable[[str], None] = print
    _by_digest: dict[str, Client] = field(default_factory=dict, init=False)
    _names: dict[str, str] = field(default_factory=dict, init=False)
    """Each way a client's name can look (:func:`name_looks`) -> its name (what an OAuth subject may not read as)."""
    _oauth: Any = field(default=None, init=False)
    _oauth_default: str | None = field(default=None, init=False)
    _stat: tuple[int, int, int] | None = field(default=None, init=False)
    _checked: float = field(default=0.0, init=False)
    _broken: str | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self._load()  # at start a bad file is an error, not a degraded gateway

    @property
    def clients(self) -> list[Client]:
        return sorted({c.name: c for c in self._by_digest.values()}.values(), key=lambda c: c.name)

    @property
    def oauth(self) -> Any:
        """The :class:`~riskrank.serving.oauth.JwtValidator` (None without ``oauth``)."""
        return self._oauth

    def _file_stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self) -> None:
        stat = self._file_stat()
        clients, oauth = read_clients_file(self.path, self.policies, self.reserved)
        validator, default = None, None
        if oauth is not None:
            from riskrank.extras import requires

            with requires("teams", "OAuth bearer JWTs (the clients file's oauth)"):
                from riskrank.serving.oauth import JwtValidator, OAuthConfig
            body = {k: v for k, v in oauth.items() if k != "default_policy"}
            validator = JwtValidator(OAuthConfig.from_dict(body, f"{self.path}: oauth"))
            default = oauth.get("default_policy", self.policies.default)
        self._by_digest = {d: c for c in clients.values() for d in c.digests}
        self._names = {look: n for n in clients for look in name_looks(n)}
        self._oauth, self._oauth_default, self._stat, self._broken = validator, default, stat, None

    def refresh(self) -> None:
        """Re-read the file if it changed since the last look (at most every
        :data:`RELOAD_EVERY_S`). A file that no longer reads refuses every client token."""
        now = time.monotonic()
        if now - self._checked < RELOAD_EVERY_S:
            return
        with self._lock:
            self._checked = now
            stat = self._file_stat()
            if stat == self._stat:
                return
            try:
                self._load()
            except RiskrankError as exc:
                self._by_digest, self._oauth, self._stat = {}, None, stat
                if self._broken != str(exc):
                    self._broken = str(exc)
                    self.log(f"clients: {exc}; every client token is refused until the file is fixed")
                return
            self.log(f"clients: {self.path} re-read: {len(self.clients)} clients")

    def lookup(self, token: str) -> Identity | None:
        """The client whose token this is (its digest in the file), or None."""
        self.refresh()
        c = self._by_digest.get(token_digest(token))
        return Identity(c.name, c.policy, "client") if c is not None else None

    def validate_jwt(self, token: str) -> Identity:
        """The identity of an OAuth bearer JWT; :class:`riskrank.serving.oauth.JwtRejected`
        (one line) when it is not valid, or names a policy the file lacks. Blocking (the
        issuer's keys may be fetched): call it off the event loop."""
        from riskrank.serving.oauth import JwtRejected

        validator = self._oauth
        if validator is None:
            raise JwtRejected("this gateway takes no OAuth tokens")
        got = validator.validate(token)
        issuer = validator.config.issuer
        shadowed = next((self._names[look] for look in name_looks(got.name) if look in self._names), None)
        if shadowed is not None:
            raise IdentityCollision(issuer, got.name, shadowed)
        who = oauth_identity(issuer, got.name)
        policy = got.policy or self._oauth_default
        if policy not in self.policies.named:
            raise JwtRejected(f"the token of {who!r} names the policy {policy!r}, which the policy file lacks")
        return Identity(who, policy, "oauth")


def add_client(path: Path, name: str, policy: str, *, token: str | None = None, rotate: bool = False,
               policies: Policies | None = None) -> str:
    """Add ``name`` to the clients file at ``path`` (created if missing) with a new token, or
    (``rotate``) add a second token to an existing client; the file is written atomically and
    the token is returned (shown once: only its digest is kept)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{name!r}: a client name is 1 to 64 letters, digits, '_', '.', '@' or '-'; nothing was written")
    data: dict[str, Any] = {"clients": {}}
    if path.exists():
        data = loads_strict(path.read_text(encoding="utf-8-sig"), str(path), ConfigError)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the clients file must hold a JSON object")
        unknown = sorted(set(data) - TOP_KEYS)
        if unknown or (data and "clients" not in data and "oauth" not in data) or not isinstance(data.get("clients", {}), dict):
            # another file (a servers file, a policy file) given as --clients: writing into it would break it
            raise ConfigError(f"{path}: not a clients file (expected {{\"clients\": {{...}}}}"
                              + (f"; it holds {unknown}" if unknown else "") + "); nothing was written")
        data.setdefault("clients", {})
    token = token if token is not None else secrets.token_urlsafe(32)
    check_token_strength(token)
    entry = data["clients"].get(name)
    if entry is not None and not rotate:
        raise ConfigError(f"{path}: a client named {name!r} exists; --rotate adds a second token to it")
    if entry is None and rotate:
        raise ConfigError(f"{path}: no client named {name!r} to rotate")
    if entry is None:
        data["clients"][name] = {"token_sha256": token_digest(token), "policy": policy}
    else:
        old = entry["token_sha256"]
        entry["token_sha256"] = [*([old] if isinstance(old, str) else old), token_digest(token)]
    if policies is not None:
        parse_clients(data, str(path), policies)
    import json

    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    return token
