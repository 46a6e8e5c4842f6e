"""The OAuth resource server (riskrank.serving.oauth): bearer JWTs checked against an issuer's
JWKS, served from a file and from a loopback HTTP server. No network, no sleeping: the
validator's clock is a counter the tests move."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

jwt = pytest.importorskip("jwt")
pytest.importorskip("cryptography")

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402
from jwt.algorithms import ECAlgorithm, RSAAlgorithm  # noqa: E402

from riskrank.serving.oauth import (  # noqa: E402
    METADATA_PATH,
    JwtClient,
    JwtRejected,
    JwtValidator,
    OAuthConfig,
    OAuthConfigError,
    looks_like_jwt,
)

ISSUER = "https://issuer.example"
AUDIENCE = "https://gateway.example/mcp"


class Clock:
    """Monotonic seconds the test advances by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Key:
    """A private key, its kid and algorithm, and its public JWK."""

    def __init__(self, kid: str, alg: str, private: Any) -> None:
        self.kid, self.alg, self.private = kid, alg, private
        algo = RSAAlgorithm if alg.startswith("RS") else ECAlgorithm
        self.jwk = {**algo.to_jwk(private.public_key(), as_dict=True), "kid": kid, "alg": alg, "use": "sig"}

    def sign(self, claims: dict[str, Any], **headers: Any) -> str:
        return jwt.encode(claims, self.private, algorithm=self.alg, headers={"kid": self.kid, **headers})


@pytest.fixture(scope="module")
def keys() -> dict[str, Key]:
    return {
        "rsa": Key("rsa-1", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "ec": Key("ec-1", "ES256", ec.generate_private_key(ec.SECP256R1())),
        "rotated": Key("rsa-2", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "outsider": Key("rsa-1", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    }


def claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now + 600, "iat": now, "policy": "readonly"}
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def jwks_of(*ks: Key) -> dict[str, Any]:
    return {"keys": [k.jwk for k in ks]}


class JwksServer:
    """A loopback JWKS endpoint: serves ``doc`` (or ``status``) and counts its hits."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc: Any = doc
        self.status = 200
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                if self.path == "/moved":
                    self.send_response(302)
                    self.send_header("Location", "/jwks")
                    self.end_headers()
                    return
                body = outer.doc if isinstance(outer.doc, bytes) else json.dumps(outer.doc).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(keys: dict[str, Key]) -> Iterator[JwksServer]:
    srv = JwksServer(jwks_of(keys["rsa"], keys["ec"]))
    yield srv
    srv.close()


@pytest.fixture
def jwks_file(tmp_path: Path, keys: dict[str, Key]) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks_of(keys["rsa"], keys["ec"])))
    return path


def validator(jwks: str | Path, clock: Clock | None = None, **config: Any) -> JwtValidator:
    cfg = OAuthConfig(issuer=ISSUER, audience=AUDIENCE, jwks=str(jwks), **config)
    return JwtValidator(cfg, clock=clock or Clock())


def rejected(v: JwtValidator, token: str) -> JwtRejected:
    with pytest.raises(JwtRejected) as info:
        v.validate(token)
    exc = info.value
    assert exc.code == "unauthorized"
    assert "\n" not in str(exc)
    if len(token) > 20:
        assert token[:40] not in str(exc)
    return exc


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256(header: dict[str, Any], payload: dict[str, Any], secret: bytes) -> str:
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    sig = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(sig)}"


# -- good tokens ------------------------------------------------------------------------------


def test_good_token_from_a_jwks_file(jwks_file: Path, keys: dict[str, Key]) -> None:
    v = validator(jwks_file, policy_claim="policy")
    c = claims()
    client = v.validate(keys["rsa"].sign(c))
    assert isinstance(client, JwtClient)
    assert (client.name, client.policy, client.expires_at) == ("alice", "readonly", float(c["exp"]))
    assert client.claims["iss"] == ISSUER


def test_good_token_from_a_loopback_jwks_server(server: JwksServer, keys: dict[str, Key]) -> None:
    v = validator(server.url)
    client = v.validate(keys["ec"].sign(claims(sub="bob")))
    assert (client.name, client.policy) == ("bob", None)  # no policy_claim configured
    v.validate(keys["rsa"].sign(claims()))
    assert server.hits == 1  # cached


def test_custom_client_claim_and_missing_policy_claim(jwks_file: Path, keys: dict[str, Key]) -> None:
    v = validator(jwks_file, client_claim="client_id", policy_claim="riskrank_policy")
    client = v.validate(keys["rsa"].sign(claims(client_id="ci-runner")))
    assert (client.name, client.policy) == ("ci-runner", None)


def test_audience_list_containing_ours(jwks_file: Path, keys: dict[str, Key]) -> None:
    v = validator(jwks_file)
    assert v.validate(keys["rsa"].sign(claims(aud=["https://other.example", AUDIENCE]))).name == "alice"
    assert rejected(v, keys["rsa"].sign(claims(aud=["https://other.example"]))).reason == "audience"


def test_token_without_kid_against_a_single_key(tmp_path: Path, keys: dict[str, Key]) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps(jwks_of(keys["rsa"])))
    token = jwt.encode(claims(), keys["rsa"].private, algorithm="RS256")
    assert validator(path).validate(token).name == "alice"
    path2 = tmp_path / "two.json"
    path2.write_text(json.dumps(jwks_of(keys["rsa"], keys["ec"])))
    assert rejected(validator(path2), token).reason == "unknown_key"


# -- claims -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("over", "reason", "words"), [
    ({"exp": int(time.time()) - 3600}, "expired", "expired"),
    ({"nbf": int(time.time()) + 3600}, "not_yet_valid", "not yet valid (nbf)"),
    ({"iat": int(time.time()) + 3600}, "not_yet_valid", "not yet valid (iat)"),
    ({"aud": "https://other.example"}, "audience", "wrong audience"),
    ({"iss": "https://evil.example"}, "issuer", "wrong issuer"),
    ({"exp": None}, "claim", "missing claim exp"),
    ({"iss": None}, "claim", "missing claim iss"),
    ({"aud": None}, "claim", "missing claim aud"),
    ({"sub": None}, "claim", "missing claim sub"),
    ({"sub": ""}, "claim", "claim sub must be a non-empty string"),
    ({"sub": "eve\nINFO forged log line"}, "claim", "control characters"),
    ({"exp": "soon"}, "malformed", "malformed claim exp"),
])
def test_claims_are_checked(jwks_file: Path, keys: dict[str, Key], over: dict[str, Any], reason: str, words: str) -> None:
    exc = rejected(validator(jwks_file), keys["rsa"].sign(claims(**over)))
    assert exc.reason == reason
    assert words in str(exc)


def test_leeway_absorbs_small_clock_skew(jwks_file: Path, keys: dict[str, Key]) -> None:
    token = keys["rsa"].sign(claims(exp=int(time.time()) - 5))
    assert validator(jwks_file).validate(token).name == "alice"  # default leeway 30 s
    assert rejected(validator(jwks_file, leeway_s=0), token).reason == "expired"


def test_policy_claim_of_the_wrong_type(jwks_file: Path, keys: dict[str, Key]) -> None:
    exc = rejected(validator(jwks_file, policy_claim="policy"), keys["rsa"].sign(claims(policy=["admin"])))
    assert exc.reason == "claim" and "policy" in str(exc)


# -- keys and signatures ----------------------------------------------------------------------


def test_forged_with_a_key_not_in_the_jwks_but_a_known_kid(jwks_file: Path, keys: dict[str, Key]) -> None:
    exc = rejected(validator(jwks_file), keys["outsider"].sign(claims()))  # kid "rsa-1", other key
    assert exc.reason == "signature" and str(exc) == "bad signature"


def test_unknown_kid_refetch_is_rate_limited(server: JwksServer, keys: dict[str, Key]) -> None:
    clock = Clock()
    v = JwtValidator(OAuthConfig(issuer=ISSUER, audience=AUDIENCE, jwks=server.url), refresh_min_s=60, clock=clock)
    v.validate(keys["rsa"].sign(claims()))
    assert server.hits == 1
    for i in range(25):  # a flood of made-up kids right after the fetch: no refetch at all
        exc = rejected(v, keys["rsa"].sign(claims(), kid=f"bogus-{i}"))
        assert exc.reason == "unknown_key" and "bogus" not in str(exc)
    assert server.hits == 1
    clock.advance(61)
    for i in range(25):  # past refresh_min_s: one refetch for the whole flood
        rejected(v, keys["rsa"].sign(claims(), kid=f"bogus-again-{i}"))
    assert server.hits == 2
    v.validate(keys["ec"].sign(claims()))  # known kids never wait for the limit
    assert server.hits == 2


def test_rotated_in_key_is_accepted_after_refetch(server: JwksServer, keys: dict[str, Key]) -> None:
    clock = Clock()
    v = JwtValidator(OAuthConfig(issuer=ISSUER, audience=AUDIENCE, jwks=server.url), refresh_min_s=60, clock=clock)
    v.validate(keys["rsa"].sign(claims()))
    server.doc = jwks_of(keys["rsa"], keys["ec"], keys["rotated"])
    token = keys["rotated"].sign(claims())
    assert rejected(v, token).reason == "unknown_key"  # fetched a moment ago: not yet
    clock.advance(60)
    assert v.validate(token).name == "alice"
    assert server.hits == 2


def test_rotation_through_a_jwks_file(jwks_file: Path, keys: dict[str, Key]) -> None:
    clock = Clock()
    v = validator(jwks_file, clock)
    v.validate(keys["rsa"].sign(claims()))
    jwks_file.write_text(json.dumps(jwks_of(keys["rotated"])))  # the old key withdrawn
    clock.advance(61)
    assert v.validate(keys["rotated"].sign(claims())).name == "alice"
    assert rejected(v, keys["rsa"].sign(claims())).reason == "unknown_key"


def test_withdrawn_key_stops_working_after_max_age(server: JwksServer, keys: dict[str, Key]) -> None:
    clock = Clock()
    v = JwtValidator(OAuthConfig(issuer=ISSUER, audience=AUDIENCE, jwks=server.url), max_age_s=300, clock=clock)
    token = keys["ec"].sign(claims())
    v.validate(token)
    server.doc = jwks_of(keys["rsa"])
    v.validate(token)  # cached
    clock.advance(301)
    assert rejected(v, token).reason == "unknown_key"
    assert server.hits == 2


def test_concurrent_validations_fetch_once(server: JwksServer, keys: dict[str, Key]) -> None:
    v = JwtValidator(OAuthConfig(issuer=ISSUER, audience=AUDIENCE, jwks=server.url), refresh_min_s=0, clock=Clock())
    v.validate(keys["rsa"].sign(claims()))
    server.doc = jwks_of(keys["rsa"], keys["rotated"])
    token = keys["rotated"].sign(claims())
    barrier = threading.Barrier(8)
    results: list[Any] = []

    def work() -> None:
        barrier.wait()
        try:
            results.append(v.validate(token).name)
        except Exception as exc:  # recorded, asserted below
            results.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["alice"] * 8
    assert server.hits == 2  # the first thread refetched; the others found the key


def test_key_that_cannot_do_the_tokens_algorithm(jwks_file: Path, keys: dict[str, Key]) -> None:
    forged = jwt.encode(claims(), keys["ec"].private, algorithm="ES256", headers={"kid": "rsa-1"})
    exc = rejected(validator(jwks_file), forged)
    assert exc.reason == "algorithm"


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_unusable_keys_in_the_jwks_are_ignored(tmp_path: Path, keys: dict[str, Key]) -> None:
    short = Key("short", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=1024))
    secret = {"kty": "oct", "kid": "shared", "k": b64(b"a shared secret of 32 bytes!!!!!")}
    enc = {**keys["rotated"].jwk, "use": "enc"}
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [short.jwk, secret, enc, "junk", keys["rsa"].jwk]}))
    v = validator(path)
    assert v.validate(keys["rsa"].sign(claims())).name == "alice"
    assert rejected(v, short.sign(claims())).reason == "unknown_key"
    assert rejected(v, keys["rotated"].sign(claims())).reason == "unknown_key"
    assert rejected(v, hs256({"alg": "HS256", "kid": "shared"}, claims(), b"a shared secret of 32 bytes!!!!!")).reason == "algorithm"


# -- algorithms and shapes --------------------------------------------------------------------


def test_alg_none_and_hs256_are_refused_without_a_fetch(server: JwksServer, keys: dict[str, Key]) -> None:
    v = validator(server.url)
    unsigned = f"{b64(json.dumps({'alg': 'none', 'kid': 'rsa-1'}).encode())}.{b64(json.dumps(claims()).encode())}."
    exc = rejected(v, unsigned)
    assert exc.reason == "algorithm" and "none" in str(exc)
    # The classic confusion: HMAC keyed with the issuer's public key, which anyone can read.
    pem = keys["rsa"].private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    exc = rejected(v, hs256({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, claims(), pem))
    assert exc.reason == "algorithm" and "HS256" in str(exc)
    assert server.hits == 0


def test_algorithm_outside_the_configured_list(jwks_file: Path, keys: dict[str, Key]) -> None:
    v = validator(jwks_file, algorithms=("RS256",))
    assert rejected(v, keys["ec"].sign(claims())).reason == "algorithm"


@pytest.mark.parametrize("token", [
    "", "not-a-token", "a.b.c", "a.b", "eyJ.eyJ.sig.extra", "é.é.é",
    f"{b64(b'[1]')}.{b64(b'{}')}.c2ln",
    f"{b64(b'{' * 1)}.{b64(b'{}')}.c2ln",
    f"{b64(b'[' * 5000)}.{b64(b'{}')}.c2ln",
    "x" * 20000,
])
def test_malformed_tokens(jwks_file: Path, token: str) -> None:
    assert rejected(validator(jwks_file), token).reason in ("malformed", "algorithm")


def test_malformed_payload_of_a_well_signed_shape(jwks_file: Path, keys: dict[str, Key]) -> None:
    token = keys["rsa"].sign(claims())
    head, _, sig = token.split(".")
    exc = rejected(validator(jwks_file), f"{head}.{b64(b'not json')}.{sig}")
    assert exc.reason in ("malformed", "signature")


def test_looks_like_jwt(keys: dict[str, Key]) -> None:
    assert looks_like_jwt(keys["rsa"].sign(claims()))
    assert looks_like_jwt(f"{b64(json.dumps({'alg': 'none'}).encode())}.{b64(b'{}')}.")
    for token in ("", "rr_live_0123456789abcdef", "a.b.c", "abc.def", "a.b.c.d", f"{b64(b'[1]')}.e30.x",
                  "x" * 20000, "eyJ.eyJ.sig"):
        assert not looks_like_jwt(token), token


def test_rejection_never_echoes_the_token(jwks_file: Path, keys: dict[str, Key]) -> None:
    token = keys["outsider"].sign(claims(sub="alice-secret-marker"), kid="kid-secret-marker")
    exc = rejected(validator(jwks_file, clock=Clock()), token)
    assert "marker" not in str(exc) and token not in str(exc)


# -- fail closed ------------------------------------------------------------------------------


def test_jwks_server_down_fails_closed(keys: dict[str, Key]) -> None:
    srv = JwksServer(jwks_of(keys["rsa"]))
    url = srv.url
    srv.close()  # nothing listens there now
    exc = rejected(validator(url), keys["rsa"].sign(claims()))
    assert exc.reason == "keys_unavailable" and "unavailable" in str(exc)


@pytest.mark.parametrize(("doc", "status", "words"), [
    (b"{not json", 200, "not valid JSON"),
    ([1, 2], 200, "not a JWKS"),
    ({"keys": []}, 200, "no usable signing key"),
    ({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "x"}]}, 200, "no usable signing key"),
    ({"error": "down"}, 503, "HTTP 503"),
])
def test_unusable_jwks_fails_closed(server: JwksServer, keys: dict[str, Key], doc: Any, status: int, words: str) -> None:
    server.doc, server.status = doc, status
    exc = rejected(validator(server.url), keys["rsa"].sign(claims()))
    assert exc.reason == "keys_unavailable" and words in str(exc)


def test_redirect_is_not_followed(server: JwksServer, keys: dict[str, Key]) -> None:
    exc = rejected(validator(server.url.replace("/jwks", "/moved")), keys["rsa"].sign(claims()))
    assert exc.reason == "keys_unavailable" and "HTTP 302" in str(exc)
    assert server.hits == 1


def test_missing_jwks_file_fails_closed(tmp_path: Path, keys: dict[str, Key]) -> None:
    exc = rejected(validator(tmp_path / "absent.json"), keys["rsa"].sign(claims()))
    assert exc.reason == "keys_unavailable"
    assert str(tmp_path) not in str(exc)


def test_failed_first_fetch_is_rate_limited_too(server: JwksServer, keys: dict[str, Key]) -> None:
    clock = Clock()
    server.status, server.doc = 500, {"error": "x"}
    v = JwtValidator(OAuthConfig(issuer=ISSUER, audience=AUDIENCE, jwks=server.url), refresh_min_s=60, clock=clock)
    token = keys["rsa"].sign(claims())
    for _ in range(10):
        assert rejected(v, token).reason == "keys_unavailable"
    assert server.hits == 1
    server.status, server.doc = 200, jwks_of(keys["rsa"])
    clock.advance(60)
    assert v.validate(token).name == "alice"


def test_cached_keys_survive_an_issuer_outage(server: JwksServer, keys: dict[str, Key]) -> None:
    clock = Clock()
    v = JwtValidator(OAuthConfig(issuer=ISSUER, audience=AUDIENCE, jwks=server.url), max_age_s=300, clock=clock)
    token = keys["rsa"].sign(claims())
    v.validate(token)
    server.status, server.doc = 503, {"error": "down"}
    clock.advance(301)
    assert v.validate(token).name == "alice"  # stale keys kept rather than locking everyone out
    assert server.hits == 2


def test_refresh_now(server: JwksServer, keys: dict[str, Key]) -> None:
    v = validator(server.url)
    assert v.refresh() == 2
    server.status = 500
    with pytest.raises(JwtRejected, match="unavailable"):
        v.refresh()


# -- metadata and config ----------------------------------------------------------------------


def test_resource_metadata(jwks_file: Path) -> None:
    assert METADATA_PATH == "/.well-known/oauth-protected-resource"
    assert validator(jwks_file).resource_metadata(AUDIENCE) == {
        "resource": AUDIENCE, "authorization_servers": [ISSUER], "bearer_methods_supported": ["header"]}


def test_from_dict_good() -> None:
    cfg = OAuthConfig.from_dict({"issuer": ISSUER, "audience": AUDIENCE, "jwks": "http://127.0.0.1:9/jwks",
                                 "client_claim": "client_id", "policy_claim": "policy", "algorithms": ["ES256"],
                                 "leeway_s": 5}, "clients.json: oauth")
    assert cfg.algorithms == ("ES256",) and cfg.leeway_s == 5.0 and cfg.jwks_is_url
    assert OAuthConfig.from_dict({"issuer": ISSUER, "audience": AUDIENCE, "jwks": "/etc/riskrank/jwks.json"}, "x").client_claim == "sub"
    assert OAuthConfig.from_dict({"issuer": "http://localhost:8080", "audience": "a", "jwks": "https://h/jwks"}, "x").issuer


GOOD = {"issuer": ISSUER, "audience": AUDIENCE, "jwks": "https://issuer.example/jwks"}


@pytest.mark.parametrize(("data", "words"), [
    ({**GOOD, "audiance": "x"}, "unknown key(s) 'audiance'"),
    ({"issuer": ISSUER, "jwks": GOOD["jwks"]}, "missing audience"),
    ({**GOOD, "issuer": 7}, "issuer: must be a string"),
    ({**GOOD, "audience": ""}, "audience: must be a non-empty string"),
    ({**GOOD, "jwks": "http://issuer.example/jwks"}, "jwks: http:// is allowed only for a loopback host"),
    ({**GOOD, "jwks": "ftp://issuer.example/jwks"}, "jwks: must be an https:// URL"),
    ({**GOOD, "issuer": "http://issuer.example"}, "issuer: http:// is allowed only for a loopback host"),
    ({**GOOD, "issuer": "issuer.example"}, "issuer: must be an https:// URL"),
    ({**GOOD, "algorithms": ["none"]}, "'none' is never allowed"),
    ({**GOOD, "algorithms": ["RS256", "HS256"]}, "a shared secret is not an issuer's key"),
    ({**GOOD, "algorithms": ["XS999"]}, "unknown algorithm 'XS999'"),
    ({**GOOD, "algorithms": "RS256"}, "algorithms: must be a list"),
    ({**GOOD, "algorithms": []}, "algorithms: must be a non-empty list"),
    ({**GOOD, "algorithms": [256]}, "algorithms: must be a non-empty list"),
    ({**GOOD, "leeway_s": True}, "leeway_s: must be a number"),
    ({**GOOD, "leeway_s": -1}, "leeway_s: must be a number of seconds from 0 to 300"),
    ({**GOOD, "policy_claim": 3}, "policy_claim: must be a string or null"),
    ({**GOOD, "client_claim": ""}, "client_claim: must be a non-empty string"),
])
def test_from_dict_errors(data: dict[str, Any], words: str) -> None:
    with pytest.raises(OAuthConfigError) as info:
        OAuthConfig.from_dict(data, "clients.json: oauth")
    assert info.value.code == "invalid_config"
    assert str(info.value).startswith("clients.json: oauth")
    assert words in str(info.value), str(info.value)


def test_from_dict_not_an_object() -> None:
    with pytest.raises(OAuthConfigError, match=r"^cfg: must be an object"):
        OAuthConfig.from_dict(["issuer"], "cfg")  # type: ignore[arg-type]


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(OAuthConfigError, match="shared secret"):
        OAuthConfig(issuer=ISSUER, audience=AUDIENCE, jwks="/x.json", algorithms=("HS256",))
