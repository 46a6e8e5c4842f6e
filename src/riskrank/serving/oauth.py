"""The OAuth 2.1 resource-server role of the MCP authorization spec: bearer JWTs that an
authorization server (the *issuer*) signed, checked against the issuer's published keys.

A shared bearer token tells the gate only "someone holding the secret"; a JWT names the client
(``client_claim``, ``sub`` by default) so audit lines and per-client policy can follow it, and
the issuer can revoke or rotate without every client being handed a new secret. What this
module checks, and why:

- the signature, with a key from the issuer's JWKS picked by the token's ``kid``; only the
  asymmetric algorithms of :attr:`OAuthConfig.algorithms` (never ``none``, never ``HS*``: a
  shared secret is not an issuer's key, and accepting HMAC would let anyone who knows the
  public key mint tokens), and the algorithm must be one the key can do;
- ``exp`` (required: a token that never expires cannot be contained once leaked), ``nbf`` and
  ``iat`` when present, within :attr:`OAuthConfig.leeway_s` of clock skew;
- ``iss`` exactly, and ``aud`` containing this resource (RFC 8707): a token the issuer minted
  for another resource must not be replayable here;
- the client claim is a non-empty string without control characters (it is written to logs).

The JWKS is fetched with httpx (TLS verified, no redirects, size-capped) or read from a file,
and cached. A token with an unknown ``kid`` triggers at most one refetch per
``refresh_min_s`` (so a flood of made-up kids cannot hammer the issuer), and that is also how a
rotated-in key is picked up. Keys that cannot be fetched or parsed fail closed: a
:class:`JwtRejected` saying the issuer's keys are unavailable. Once keys are cached, a failed
refresh keeps serving them (a transient outage at the issuer must not lock every client out).

PyJWT (the ``teams`` extra) does the JOSE work; it is imported when a validator is built, so
the config and :func:`looks_like_jwt` work without it.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from riskrank.errors import RiskrankError
from riskrank.extras import requires
from riskrank.fileio import UnsafeFileError, decode_json_bytes, loads_strict, read_regular_file

if TYPE_CHECKING:
    from jwt import PyJWK

log = logging.getLogger("riskrank.oauth")

#: RFC 9728's well-known path of the protected resource metadata document.
METADATA_PATH = "/.well-known/oauth-protected-resource"
#: The asymmetric JWS algorithms a config may allow (RFC 7518, RFC 8037).
ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
#: A bearer token longer than this is refused before it is parsed (real access tokens are a
#: few hundred bytes to a few KiB; parsing megabytes of attacker input buys nothing).
MAX_TOKEN_CHARS = 16 * 1024
#: A JWKS document over this size is refused (a real one is a few KiB).
MAX_JWKS_BYTES = 1 << 20
#: A cached JWKS older than this is refreshed on the next token (a key the issuer withdrew
#: stops working within this time even if no token ever names an unknown kid).
DEFAULT_MAX_AGE_S = 300.0
#: RSA keys shorter than this are not used (NIST and RFC 7518 §3.3 require 2048 bits).
MIN_RSA_BITS = 2048
MAX_CLAIM_CHARS = 256
CONFIG_KEYS = ("issuer", "audience", "jwks", "client_claim", "policy_claim", "algorithms", "leeway_s")
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
#: Control characters, and the invisible ones that reorder or hide what is shown (bidi
#: controls, zero-width characters, tag characters): never in a name a log line or the console shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\U000e0000-\U000e007f]")


class JwtRejected(RiskrankError):
    """A bearer JWT that does not authorise its holder. ``str(exc)`` is one line saying why,
    never echoing the token; ``reason`` is a stable word for the same (``expired``,
    ``not_yet_valid``, ``audience``, ``issuer``, ``unknown_key``, ``signature``, ``algorithm``,
    ``malformed``, ``claim``, ``keys_unavailable``) for a gate that maps it to a status or an
    RFC 6750 ``error`` attribute."""

    code = "unauthorized"

    def __init__(self, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason


class OAuthConfigError(RiskrankError, ValueError):
    """An ``oauth`` configuration that cannot be used as written."""

    code = "invalid_config"


def _is_loopback(host: str) -> bool:
    # Kept here rather than imported from the gate's module: the gate imports this one.
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_url(value: str, where: str, *, allow_path: bool) -> None:
    """An https URL, or http only to a loopback host (TLS is what proves the keys, or the
    issuer, are the issuer's; without it anyone on the path could serve their own keys)."""
    parts = urlsplit(value)
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        if not parts.hostname:
            raise OAuthConfigError(f"{where}: {value!r} has no host")
        if scheme == "http" and not _is_loopback(parts.hostname):
            raise OAuthConfigError(f"{where}: http:// is allowed only for a loopback host (127.0.0.1, ::1, "
                                   f"localhost); use https:// for {parts.hostname}")
        if parts.username is not None or parts.password is not None:
            raise OAuthConfigError(f"{where}: credentials in the URL are not supported")
        return
    if not allow_path or "://" in value:
        raise OAuthConfigError(f"{where}: must be an https:// URL (http:// only for a loopback host)"
                               + (" or a file path" if allow_path else ""))


def _check_config(cfg: Any, where: str) -> None:
    """The rules of a config (``cfg``: an :class:`OAuthConfig` or the values it is about to get)."""
    for name in ("issuer", "audience", "jwks", "client_claim"):
        value = getattr(cfg, name)
        if not isinstance(value, str) or not value.strip():
            raise OAuthConfigError(f"{where}.{name}: must be a non-empty string")
        if value != value.strip() or _CONTROL.search(value):
            raise OAuthConfigError(f"{where}.{name}: must not have surrounding spaces or control characters")
    _check_url(cfg.issuer, f"{where}.issuer", allow_path=False)
    if urlsplit(cfg.issuer).query or "#" in cfg.issuer:  # RFC 8414: an issuer has neither; "#" joins it to a subject
        raise OAuthConfigError(f"{where}.issuer: must have no query or fragment")
    _check_url(cfg.jwks, f"{where}.jwks", allow_path=True)
    if cfg.policy_claim is not None and (not isinstance(cfg.policy_claim, str) or not cfg.policy_claim.strip()):
        raise OAuthConfigError(f"{where}.policy_claim: must be a non-empty string or null")
    algs = cfg.algorithms
    if not isinstance(algs, tuple) or not algs or not all(isinstance(a, str) for a in algs):
        raise OAuthConfigError(f"{where}.algorithms: must be a non-empty list of algorithm names")
    for alg in algs:
        if alg.lower() == "none":
            raise OAuthConfigError(f"{where}.algorithms: 'none' is never allowed (an unsigned token proves nothing)")
        if alg.upper().startswith("HS"):
            raise OAuthConfigError(f"{where}.algorithms: {alg} is not allowed: a shared secret is not an "
                                   "issuer's key (use the issuer's asymmetric algorithm, e.g. RS256 or ES256)")
        if alg not in ASYMMETRIC_ALGORITHMS:
            raise OAuthConfigError(f"{where}.algorithms: unknown algorithm {alg!r} (known: {', '.join(ASYMMETRIC_ALGORITHMS)})")
    if len(set(algs)) != len(algs):
        raise OAuthConfigError(f"{where}.algorithms: lists an algorithm twice")
    leeway = cfg.leeway_s
    if isinstance(leeway, bool) or not isinstance(leeway, int | float) or not math.isfinite(leeway) or not 0 <= leeway <= 300:
        raise OAuthConfigError(f"{where}.leeway_s: must be a number of seconds from 0 to 300")


@dataclass(frozen=True)
class OAuthConfig:
    """Which issuer's tokens this resource accepts, and how to read the client from them.
    Checked on construction, so a config built in code is held to the rules
    :meth:`from_dict` applies to a file."""

    issuer: str
    audience: str
    jwks: str
    client_claim: str = "sub"
    policy_claim: str | None = None
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    leeway_s: float = 30.0

    def __post_init__(self) -> None:
        _check_config(self, "OAuthConfig")

    @property
    def jwks_is_url(self) -> bool:
        return urlsplit(self.jwks).scheme.lower() in ("http", "https")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> OAuthConfig:
        """The config of a JSON object (``where`` names it in errors, e.g. ``clients.json: oauth``).
        Strict: an unknown key is an error (a misspelt ``audiance`` must not silently
        leave the audience unchecked), and so is a value of the wrong type."""
        if not isinstance(data, Mapping):
            raise OAuthConfigError(f"{where}: must be an object")
        unknown = sorted(set(data) - set(CONFIG_KEYS))
        if unknown:
            raise OAuthConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} (known: {', '.join(CONFIG_KEYS)})")
        missing = [k for k in ("issuer", "audience", "jwks") if k not in data]
        if missing:
            raise OAuthConfigError(f"{where}: missing {', '.join(missing)}")
        kwargs: dict[str, Any] = dict(data)
        for name in ("issuer", "audience", "jwks", "client_claim"):
            if name in kwargs and not isinstance(kwargs[name], str):
                raise OAuthConfigError(f"{where}.{name}: must be a string")
        if "policy_claim" in kwargs and kwargs["policy_claim"] is not None and not isinstance(kwargs["policy_claim"], str):
            raise OAuthConfigError(f"{where}.policy_claim: must be a string or null")
        if "algorithms" in kwargs:
            algs = kwargs["algorithms"]
            if isinstance(algs, str) or not isinstance(algs, list | tuple):
                raise OAuthConfigError(f"{where}.algorithms: must be a list of algorithm names")
            kwargs["algorithms"] = tuple(algs)
        if "leeway_s" in kwargs:
            leeway = kwargs["leeway_s"]
            if isinstance(leeway, bool) or not isinstance(leeway, int | float):
                raise OAuthConfigError(f"{where}.leeway_s: must be a number")
            kwargs["leeway_s"] = float(leeway)
        defaults = {f.name: f.default for f in fields(cls)}
        _check_config(SimpleNamespace(**{**defaults, **kwargs}), where)  # errors name `where`
        return cls(**kwargs)


@dataclass(frozen=True)
class JwtClient:
    """Who a valid token names: ``name`` (the client claim, for audit lines and the policy
    lookup), ``policy`` (the policy claim's value, if configured and present), all verified
    ``claims``, and ``expires_at`` (the ``exp``, seconds since the epoch) so a caller may cache
    the result no longer than the token lives."""

    name: str
    policy: str | None
    claims: dict[str, Any] = field(repr=False)
    expires_at: float | None


def looks_like_jwt(token: str) -> bool:
    """Whether ``token`` has a JWS compact shape: three base64url segments whose first decodes
    to a JSON object. Lets the gate try its clients-file tokens first and spend a JWT
    validation (and possibly a JWKS fetch) only on tokens that could be one."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        return False
    parts = token.split(".")
    if len(parts) != 3 or not all(_B64URL.fullmatch(p) for p in parts[:2]) or (parts[2] and not _B64URL.fullmatch(parts[2])):
        return False
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    except (binascii.Error, ValueError, RecursionError):
        return False
    return isinstance(header, dict)


class _Unavailable(Exception):
    """The JWKS could not be fetched or parsed (internal: turned into :class:`JwtRejected`)."""


@dataclass(frozen=True)
class _KeySet:
    """One parsed JWKS: kid -> {algorithm -> key}, plus the kid-less keys. Immutable, so a
    reader on another thread always sees a whole set, never one half-replaced."""

    by_kid: dict[str, dict[str, PyJWK]]
    anonymous: tuple[dict[str, PyJWK], ...]
    fetched_at: float

    @property
    def size(self) -> int:
        return len(self.by_kid) + len(self.anonymous)


class JwtValidator:
    """Validates bearer JWTs for one :class:`OAuthConfig`; safe to share between threads.

    ``refresh_min_s``: the least time between two JWKS fetches an unknown ``kid`` (or a stale
    cache) may trigger. ``timeout_s``: for one fetch. ``max_age_s``: a cached JWKS older than
    this is refreshed. ``clock``: monotonic seconds (tests move it instead of sleeping)."""

    def __init__(self, config: OAuthConfig, *, refresh_min_s: float = 60.0, timeout_s: float = 5.0,
                 max_age_s: float = DEFAULT_MAX_AGE_S, clock: Callable[[], float] = time.monotonic) -> None:
        with requires("teams", "OAuth bearer tokens (JWT)"):
            import jwt
            from cryptography.hazmat.primitives.asymmetric import rsa
        for name, value in (("refresh_min_s", refresh_min_s), ("max_age_s", max_age_s)):
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0")
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError("timeout_s must be a finite number > 0")
        self.config = config
        self.refresh_min_s = float(refresh_min_s)
        self.timeout_s = float(timeout_s)
        self.max_age_s = float(max_age_s)
        self._jwt = jwt
        self._rsa_public = rsa.RSAPublicKey
        self._clock = clock
        self._keys: _KeySet | None = None
        self._last_attempt: float | None = None
        self._last_error = "not fetched yet"
        self._fetch_lock = threading.Lock()

    # -- tokens -----------------------------------------------------------------------------

    def validate(self, token: str) -> JwtClient:
        """The client a valid token names; :class:`JwtRejected` (one line, no token in it)
        for anything else. Cheap checks (shape, algorithm) come before the key lookup, so
        junk never causes a JWKS fetch."""
        jwt = self._jwt
        cfg = self.config
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS or not token.isascii():
            raise JwtRejected("malformed token", "malformed")
        try:
            header = jwt.get_unverified_header(token)
        except (jwt.PyJWTError, ValueError, RecursionError):
            raise JwtRejected("malformed token (not a signed JWT)", "malformed") from None
        alg = header.get("alg")
        if alg not in cfg.algorithms:
            # Named only if it is short and plain: the header is the caller's to write.
            shown = f" {alg}" if isinstance(alg, str) and re.fullmatch(r"[A-Za-z0-9]{1,10}", alg) else ""
            raise JwtRejected(f"algorithm{shown} not allowed (allowed: {', '.join(cfg.algorithms)})", "algorithm")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):  # newer PyJWT checks this too; older ones do not
            raise JwtRejected("malformed token (kid must be a string)", "malformed")
        key = self._key(kid, alg)
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[alg], audience=cfg.audience, issuer=cfg.issuer, leeway=cfg.leeway_s,
                options={"require": ["exp", "iss", "aud"], "verify_sub": cfg.client_claim == "sub"},
            )
        except jwt.PyJWTError as exc:
            raise _rejection(exc) from None
        except (ValueError, RecursionError):  # a parser's own error on a hostile payload
            raise JwtRejected("malformed token", "malformed") from None
        return JwtClient(name=self._claim(claims, cfg.client_claim, required=True) or "",
                         policy=self._claim(claims, cfg.policy_claim, required=False) if cfg.policy_claim else None,
                         claims=claims, expires_at=_number(claims.get("exp")))

    @staticmethod
    def _claim(claims: dict[str, Any], name: str, *, required: bool) -> str | None:
        """A name-like claim: a short string without control characters, since it becomes a
        client's name in log lines and a policy's name in a lookup."""
        if name not in claims:
            if required:
                raise JwtRejected(f"missing claim {name}", "claim")
            return None
        value = claims[name]
        if not isinstance(value, str) or not value.strip():
            raise JwtRejected(f"claim {name} must be a non-empty string", "claim")
        if len(value) > MAX_CLAIM_CHARS or _CONTROL.search(value):
            raise JwtRejected(f"claim {name} must be at most {MAX_CLAIM_CHARS} characters without control characters", "claim")
        return value

    def resource_metadata(self, resource_url: str) -> dict[str, Any]:
        """RFC 9728 protected resource metadata, served at :data:`METADATA_PATH`: how an MCP
        client finds the authorization server to get a token for this resource."""
        return {"resource": resource_url, "authorization_servers": [self.config.issuer],
                "bearer_methods_supported": ["header"]}

    # -- keys -------------------------------------------------------------------------------

    def refresh(self) -> int:
        """Fetch the JWKS now (a server warming its cache at start, or an operator after a
        rotation); the number of usable keys. Raises :class:`JwtRejected` if unavailable."""
        with self._fetch_lock:
            self._last_attempt = self._clock()
            try:
                self._keys = self._load()
            except _Unavailable as exc:
                self._last_error = str(exc)
                raise JwtRejected(f"the issuer's keys are unavailable ({exc})", "keys_unavailable") from None
            return self._keys.size

    def _key(self, kid: str | None, alg: str) -> PyJWK:
        keys = self._keys
        if keys is not None and self._clock() - keys.fetched_at < self.max_age_s and _known(keys, kid):
            return _pick(keys, kid, alg)
        with self._fetch_lock:
            # Another thread may have fetched while this one waited: look again first.
            keys = self._keys
            now = self._clock()
            fresh = keys is not None and now - keys.fetched_at < self.max_age_s
            if keys is not None and fresh and _known(keys, kid):
                return _pick(keys, kid, alg)
            if kid is None and keys is not None and fresh:
                # A kid-less token against several keys: a refetch cannot make it less ambiguous.
                raise JwtRejected("token has no key id (kid) and the issuer has several keys", "unknown_key")
            if self._last_attempt is None or now - self._last_attempt >= self.refresh_min_s:
                self._last_attempt = now
                try:
                    keys = self._keys = self._load()
                except _Unavailable as exc:
                    self._last_error = str(exc)
                    log.warning("OAuth: the issuer's keys at %s are unavailable: %s", self.config.jwks, exc)
                    if keys is None:
                        raise JwtRejected(f"the issuer's keys are unavailable ({exc})", "keys_unavailable") from None
                    log.warning("OAuth: keeping the cached keys of %s until a refresh succeeds", self.config.jwks)
            elif keys is None:
                raise JwtRejected(f"the issuer's keys are unavailable ({self._last_error})", "keys_unavailable")
            if not _known(keys, kid):
                raise JwtRejected("unknown key id (kid)" if kid is not None else
                                  "token has no key id (kid) and the issuer has several keys", "unknown_key")
            return _pick(keys, kid, alg)

    def _load(self) -> _KeySet:
        raw = self._fetch() if self.config.jwks_is_url else self._read_file()
        try:
            doc = loads_strict(decode_json_bytes(raw, "JWKS", RiskrankError), "JWKS", RiskrankError)
        except RiskrankError as exc:
            raise _Unavailable(f"not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
            raise _Unavailable('not a JWKS document (expected {"keys": [...]})')
        by_kid: dict[str, dict[str, PyJWK]] = {}
        anonymous: list[dict[str, PyJWK]] = []
        for jwk in doc["keys"]:
            if not isinstance(jwk, dict):
                continue
            kid = jwk.get("kid")
            if (kid is not None and not isinstance(kid, str)) or (isinstance(kid, str) and kid in by_kid):
                continue  # a duplicate kid is ambiguous: the first one stays
            usable = self._usable(jwk)
            if not usable:
                continue
            if kid is None:
                anonymous.append(usable)
            else:
                by_kid[kid] = usable
        if not by_kid and not anonymous:
            raise _Unavailable(f"the JWKS has no usable signing key for {', '.join(self.config.algorithms)}")
        return _KeySet(by_kid, tuple(anonymous), self._clock())

    def _usable(self, jwk: dict[str, Any]) -> dict[str, PyJWK]:
        """The allowed algorithms this JWK can verify, each with its key. A key that names its
        ``alg`` is used for that one only (RFC 8725 §3.1); one that does not, for each allowed
        algorithm its type supports. Symmetric keys, encryption keys and short RSA keys never."""
        if jwk.get("kty") not in ("RSA", "EC", "OKP") or jwk.get("use", "sig") != "sig":
            return {}
        ops = jwk.get("key_ops")
        if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
            return {}
        declared = jwk.get("alg")
        algs = [declared] if declared in self.config.algorithms else [] if declared is not None else self.config.algorithms
        out: dict[str, PyJWK] = {}
        for alg in algs:
            try:
                key = self._jwt.PyJWK(jwk, alg)
            except (self._jwt.PyJWTError, ValueError, TypeError):
                continue
            if isinstance(key.key, self._rsa_public) and key.key.key_size < MIN_RSA_BITS:
                continue
            out[alg] = key
        return out

    def _fetch(self) -> bytes:
        import httpx

        url = self.config.jwks
        host = urlsplit(url).hostname or ""
        try:
            # No redirects: the configured URL is the one whose TLS certificate vouches for the
            # keys. trust_env off for loopback, so a proxy setting cannot reroute a local issuer.
            with httpx.Client(timeout=self.timeout_s, follow_redirects=False, verify=True,
                              trust_env=not _is_loopback(host)) as client, \
                    client.stream("GET", url, headers={"accept": "application/json"}) as response:
                if response.status_code != 200:
                    raise _Unavailable(f"HTTP {response.status_code} from the JWKS URL")
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_JWKS_BYTES:
                        raise _Unavailable(f"the JWKS is over {MAX_JWKS_BYTES:,} bytes")
                    chunks.append(chunk)
                return b"".join(chunks)
        except httpx.HTTPError as exc:
            # httpx's message (refused, timed out, certificate not trusted ...) without the URL.
            why = " ".join(str(exc).split())[:160] or type(exc).__name__
            raise _Unavailable(f"cannot fetch the JWKS: {why}") from None

    def _read_file(self) -> bytes:
        try:
            return read_regular_file(self.config.jwks, max_bytes=MAX_JWKS_BYTES, timeout_s=self.timeout_s)
        except (OSError, UnsafeFileError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise _Unavailable(f"cannot read the JWKS file: {why}") from None


def _known(keys: _KeySet, kid: str | None) -> bool:
    if kid is None:
        return keys.size == 1
    return kid in keys.by_kid


def _pick(keys: _KeySet, kid: str | None, alg: str) -> PyJWK:
    """The key for ``alg`` under a known ``kid``; a kid whose key cannot do ``alg`` (an RSA
    key named by an ES256 token) is refused, never tried with another algorithm."""
    entry = keys.by_kid[kid] if kid is not None else (next(iter(keys.by_kid.values())) if keys.by_kid else keys.anonymous[0])
    if alg not in entry:
        raise JwtRejected(f"algorithm {alg} not allowed for this key (it does {', '.join(entry)})", "algorithm")
    return entry[alg]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


#: PyJWT's exception classes (by name, in ``jwt.exceptions``; a name missing from an older
#: PyJWT is skipped) and what each becomes. Most specific first: some subclass others.
_REJECTIONS: tuple[tuple[str, str, str], ...] = (
    ("ExpiredSignatureError", "token expired", "expired"),
    ("InvalidAudienceError", "wrong audience (the token is not for this resource)", "audience"),
    ("InvalidIssuerError", "wrong issuer", "issuer"),
    ("InvalidSignatureError", "bad signature", "signature"),
    ("InvalidAlgorithmError", "algorithm not allowed", "algorithm"),
    ("InvalidIssuedAtError", "malformed claim iat (must be a number)", "malformed"),
    ("InvalidSubjectError", "malformed claim sub (must be a string)", "malformed"),
    ("InvalidJTIError", "malformed claim jti (must be a string)", "malformed"),
)


def _rejection(exc: Exception) -> JwtRejected:
    """PyJWT's error as one line of ours. PyJWT's own messages are not passed on (some quote
    parts of the token); the claim names come from fixed strings."""
    from jwt import exceptions

    if isinstance(exc, exceptions.ImmatureSignatureError):
        return JwtRejected(f"token not yet valid ({'iat' if '(iat)' in str(exc) else 'nbf'})", "not_yet_valid")
    if isinstance(exc, exceptions.MissingRequiredClaimError):
        return JwtRejected(f"missing claim {exc.claim}", "claim")
    for name, message, reason in _REJECTIONS:
        cls = getattr(exceptions, name, None)
        if cls is not None and isinstance(exc, cls):
            return JwtRejected(message, reason)
    if isinstance(exc, exceptions.DecodeError):
        text = str(exc)
        for claim in ("exp", "nbf"):
            if f"({claim})" in text:
                return JwtRejected(f"malformed claim {claim} (must be a number)", "malformed")
    return JwtRejected("malformed token", "malformed")
