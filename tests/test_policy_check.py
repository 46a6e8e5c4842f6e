"""``riskrank policy check``: a policy file read by the gateway's own reader and printed
resolved (every named policy, every default filled in), as a document the reader takes back to
the same policies; a bad file is one error line naming the file and the field."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from riskrank.cli import run
from riskrank.serving.gateway.config import load_policies
from riskrank.serving.gateway.policy import Policy

TEAM = {"default": "read-only", "policies": {
    "read-only": {"max_level": 2, "levels": {"restart_*": 3}, "first_seen": "quarantine", "learned_scan": True},
    "on-call": {"max_level": 4, "exposure_ttl_s": 600, "client_choices": {"lambda": [0, 0.5], "mode": ["dense+rule"]},
                "call_timeouts": {"restart_*": 30}, "preset": "untrusted"}}}


def check(monkeypatch, capfd, path: Path) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["riskrank", "policy", "check", str(path)])
    code = run()
    out, err = capfd.readouterr()
    return code, out, err


def test_named_policies_are_printed_resolved_and_read_back_the_same(tmp_path, monkeypatch, capfd):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(TEAM))
    code, out, err = check(monkeypatch, capfd, path)
    assert code == 0 and not err
    resolved = json.loads(out)
    assert resolved["default"] == "read-only" and list(resolved["policies"]) == ["read-only", "on-call"]
    keys = set(Policy().to_dict())
    read_only, on_call = resolved["policies"]["read-only"], resolved["policies"]["on-call"]
    # every key with its default filled in; the gateway-wide trust settings in the default policy only
    assert set(read_only) == keys and set(on_call) == keys - {"on_poisoned", "on_suspicious", "first_seen", "learned_scan"}
    # cover_level resolved: one below max_level unless the file says
    assert read_only == {**Policy().to_dict(), "max_level": 2, "cover_level": 1, "levels": {"restart_*": 3},
                         "first_seen": "quarantine", "learned_scan": True}
    assert on_call["untrusted"] == ["*"] and on_call["client_choices"] == {"lambda": [0.0, 0.5], "mode": ["dense+rule"]}
    assert on_call["confirm_level"] == 3 and on_call["call_timeouts"] == {"restart_*": 30.0}
    again = tmp_path / "resolved.json"
    again.write_text(out)
    assert load_policies(again).to_dict() == load_policies(path).to_dict() == resolved  # read back: the same policies


def test_a_flat_policy_is_the_policy_named_default(tmp_path, monkeypatch, capfd):
    path = tmp_path / "policy.json"
    path.write_text('{"max_level": 3, "deny": ["run_*"]}')
    code, out, _ = check(monkeypatch, capfd, path)
    assert code == 0
    assert json.loads(out) == {"default": "default", "policies": {"default": {**Policy().to_dict(), "max_level": 3,
                                                                             "cover_level": 2, "deny": ["run_*"]}}}


def test_a_bad_policy_is_one_line_naming_the_field(tmp_path, monkeypatch, capfd):
    path = tmp_path / "policy.json"
    for body, names in ((
            {"policies": {"a": {"max_level": 9}}, "default": "a"}, "policy 'a': max_level: must be a risk level"),
            ({"policies": {"a": {}}, "default": "b"}, "default: must name one of the policies (a)"),
            ({"max_level": 3, "colour": "red"}, "unknown key(s) ['colour']"),
            ({"policies": {"a": {}, "b": {"on_poisoned": "allow"}}, "default": "a"},
             "policies.b: on_poisoned apply to the whole gateway")):
        path.write_text(json.dumps(body))
        code, out, err = check(monkeypatch, capfd, path)
        assert code == 2 and not out and err.count("\n") == 1 and err.startswith(f"error: {path}") and names in err, err
