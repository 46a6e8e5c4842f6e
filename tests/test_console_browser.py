"""The console in a real headless browser (Debian's Chromium through selenium), over real
HTTP on loopback.

- approve a call end to end while a real MCP client waits on it (the gateway over stdio,
  its console on a loopback listener of its own); deny one, on an approvals page that was
  open before the call came (its script reloads it); the agent's hostile task text shows as
  text; both decisions are in the call log with who took them, and in its downloads;
- the catalogue's search box shows what ``find_tools`` returns, in the same order;
- review two tools of an audit and apply: the label file is what ``--apply-review`` writes;
- a tool description holding ``<script>`` renders as text and runs nothing;
- the console mounted in a streamable-HTTP gateway: the console's login beside the
  MCP endpoint's bearer token.

Skipped, saying why, only where chromium or chromium-driver is absent (CI installs them and
sets RISKRANK_REQUIRE_BROWSER=1, which turns the skip into a failure).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess

import anyio
import httpx
import pytest

from console_support import (
    GUARD_S,
    Browser,
    browser_missing,
    console_url,
    persona_audit,
    python_env,
    wait_for_line,
    write_policy,
)
from riskrank.serving import mcp_compat
from test_gateway_npm import payload, text
from test_server_support import TOKEN, HashEncoder, ServerThread, python_c

pytestmark = pytest.mark.mcp_sdk


@pytest.fixture(scope="module")
def browser():
    why = browser_missing()
    if why is not None:
        if os.environ.get("RISKRANK_REQUIRE_BROWSER"):
            pytest.fail(why)
        pytest.skip(why)
    with Browser() as b:
        yield b


#: A picture is drawn by matplotlib on first request; cold, on a busy 2-core machine, that can
#: outlast httpx's 5 s default. These tests check what is drawn, not how fast.
PICTURE_TIMEOUT = 60.0

HOSTILE_TASK = "return the text of a saved note <script>window.__pwned = 1</script>"


def gateway_argv(tmp_path, *extra: str) -> list[str]:
    """`riskrank mcp` in front of the fake upstream (HashEncoder: no model load), with its
    console (over stdio on a free loopback port, unless ``extra`` chooses streamable HTTP)."""
    upstream = shlex.join(python_c("s.run_fake_upstream(page_size=2)"))
    policy = write_policy(tmp_path / "policy.json")
    stdio = () if "streamable-http" in extra else ("--console-port", "0")
    return python_c("s.run_cli_with_hash_encoder(" + repr(
        ["mcp", "--upstream", upstream, "--policy", str(policy), "--audit-log", str(tmp_path / "audit.jsonl"),
         "--console", *stdio, "--confirm-timeout", "600", *extra]) + ")")


def test_approve_and_deny_while_the_agent_waits(tmp_path, browser):
    """The agent's call_tool blocks on the operator: approved, it runs; denied, it fails."""
    argv = gateway_argv(tmp_path)
    # the same call twice in one session: asked both times (once per session would not ask again)
    write_policy(tmp_path / "policy.json", confirm="every_call")
    errlog = tmp_path / "gateway.err"
    seen: dict = {}

    def operator(url: str, tool: str, action: str, note: str, *, page_open: bool = False) -> dict:
        selector = f'article.pending[data-tool="{tool}"]'
        if page_open:  # the page was open before the call came: its script reloads it
            card = browser.wait_until(selector)
        else:
            browser.login(url, "alice")
            card = browser.wait_for(url + "/approvals", selector)
        got = {"card": card.text, "task": card.find_element("css selector", "dd.task").text,
               "pwned": browser.driver.execute_script("return window.__pwned === undefined ? null : window.__pwned"),
               "args": [(a.find_element("css selector", "code.arg-name").text, a.find_element("css selector", "pre.args").text)
                        for a in card.find_elements("css selector", "div.arg")]}
        card.find_element("css selector", "textarea[name=note]").send_keys(note)
        browser.submit(card.find_element("css selector", f"button[value={action}]"))
        got["flash"] = browser.css("p.flash").text
        got["flash_class"] = browser.css("p.flash").get_attribute("class")
        return got

    async def go():
        target = mcp_compat.ServerTarget(command=argv[0], args=tuple(argv[1:]), env=python_env())
        with anyio.fail_after(GUARD_S), errlog.open("w") as err:
            async with mcp_compat.open_session(target, errlog=err) as s:
                url = await anyio.to_thread.run_sync(console_url, errlog)
                seen["url"] = url
                for action, task, note in (("approve", "return the text of a saved note", "fine, read-only"),
                                           ("deny", HOSTILE_TASK, "not this one")):
                    found = payload(await s.call_tool("find_tools", {"task": task, "k": 2}))
                    assert found["tools"][0]["name"] == "read_notes"
                    page_open = action == "deny"
                    if page_open:
                        await anyio.to_thread.run_sync(browser.get, url + "/approvals")
                        assert await anyio.to_thread.run_sync(browser.all, "#no-pending")
                    async with anyio.create_task_group() as tg:
                        async def call(action=action) -> None:
                            seen[action] = text(await s.call_tool("call_tool", {"name": "read_notes", "arguments": {"title": "x"}}))

                        tg.start_soon(call)
                        seen[action + "_page"] = await anyio.to_thread.run_sync(
                            lambda a=action, n=note, o=page_open: operator(url, "read_notes", a, n, page_open=o))
                seen["log"] = await anyio.to_thread.run_sync(read_call_log, browser, url)

    anyio.run(go)
    approved, page = seen["approve"], seen["approve_page"]
    # The card showed what the operator decides on: task, tool, level, provenance, evidence, arguments.
    assert "return the text of a saved note" in page["card"] and "L3" in page["card"] and "keyword" in page["card"]
    # Each argument is shown whole under its own name, with the digest the approval is bound to.
    assert "'saved'" in page["card"] and page["args"] == [("title", '"x"')] and "Call digest" in page["card"]
    assert page["flash"].startswith("Approved read_notes") and page["flash_class"] == "flash done"
    assert approved == (json.dumps({"called": "read_notes", "arguments": {"title": "x"}}), False)
    denied, page = seen["deny"], seen["deny_page"]
    assert denied == ("denied: the operator 'alice' did not confirm 'read_notes' (decline): not this one", True)
    assert page["flash"].startswith("Denied read_notes") and page["flash_class"] == "flash refused"  # not a success box
    assert page["task"] == HOSTILE_TASK and page["pwned"] is None  # the agent's markup is text, and ran nothing
    # Both decisions are in the audit log, with who took them.
    lines = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    calls = [(r["decision"], r["code"], r.get("decided_by"), r.get("note")) for r in lines if r["tool"] == "read_notes"]
    assert calls == [("pending", "awaiting_operator", None, None), ("allowed", "allowed", "alice", "fine, read-only"),
                     ("pending", "awaiting_operator", None, None), ("refused", "denied", "alice", "not this one")]
    assert [r["confirmed"] for r in lines if r.get("confirmed")] == ["console"]
    # The call log showed them, newest first, filtered; the download held the same lines.
    log = seen["log"]
    assert len(log["refused_rows"]) == 1 and "alice" in log["refused_rows"][0] and "not this one" in log["refused_rows"][0]
    assert log["times"] == sorted(log["times"], reverse=True) and len(log["times"]) == len(lines)
    assert [json.loads(x) for x in log["jsonl"].splitlines()] == [r for r in lines if r["tool"] == "read_notes"]
    assert log["csv"].splitlines()[0].startswith("time,task,tool,level,decision,code,reason,decided_by")
    assert "alice" in log["csv"] and "read_notes" in log["csv"]
    # Pictures of what happened: PNGs drawn on the server.
    for name, (status, media, head) in log["pictures"].items():
        assert (status, media, head) == (200, "image/png", b"\x89PNG\r\n\x1a\n"), name


def read_call_log(browser, url: str) -> dict:
    """What the call-log page and its downloads show, while the gateway runs."""
    out: dict = {}
    browser.get(url + "/log?decision=refused&tool=read_notes")
    out["refused_rows"] = [r.text for r in browser.all("#log tbody tr")]
    browser.get(url + "/log")
    out["times"] = [c.text for c in browser.all("#log tbody tr td.time")]
    jar = browser.cookies()
    out["jsonl"] = httpx.get(url + "/log.jsonl?tool=read_notes", cookies=jar).text
    out["csv"] = httpx.get(url + "/log.csv?decision=allowed", cookies=jar).text
    out["pictures"] = {}
    for name in ("levels", "decisions"):
        r = httpx.get(f"{url}/pictures/{name}.png", cookies=jar, timeout=PICTURE_TIMEOUT)
        out["pictures"][name] = (r.status_code, r.headers["content-type"], r.content[:8])
    return out


def test_the_search_box_ranks_as_find_tools(tmp_path, browser):
    argv = gateway_argv(tmp_path)
    errlog = tmp_path / "gateway.err"
    task = "count the words in a piece of text"

    async def go():
        target = mcp_compat.ServerTarget(command=argv[0], args=tuple(argv[1:]), env=python_env())
        with anyio.fail_after(GUARD_S), errlog.open("w") as err:
            async with mcp_compat.open_session(target, errlog=err) as s:
                url = await anyio.to_thread.run_sync(console_url, errlog)
                found = payload(await s.call_tool("find_tools", {"task": task, "k": 4}))

                def search() -> tuple[list[str], list[str], list[str]]:
                    browser.login(url, "bob")
                    browser.get(url + "/catalogue")
                    browser.css("#task").send_keys(task)
                    k = browser.css("#k")
                    k.clear()
                    k.send_keys("4")
                    browser.submit(browser.css("#search"))
                    return browser.names("#returned li[data-name]"), browser.names("#withheld li[data-name]"), \
                        browser.names("#tools tbody tr")

                return found, await anyio.to_thread.run_sync(search)

    found, (returned, withheld, table) = anyio.run(go)
    assert returned == [t["name"] for t in found["tools"]] and returned
    assert withheld == [w["name"] for w in found["withheld"]] + found["below_min_score"]
    assert sorted(table) == sorted(["read_notes", "purge_notes", "tidy_notes", "search_web", "count_words"])


@pytest.fixture
def served(tmp_path):
    """`riskrank serve --console` in process over a registry with a hostile description, and
    an audit of part of the demo registry (its review queue), on a real loopback port."""
    from riskrank.catalogue import ArtefactSpec, LiveCatalogue
    from riskrank.datasets.demo import demo_registry_path
    from riskrank.registry import ToolRegistry
    from riskrank.serving.console.app import create_console, with_console
    from riskrank.serving.console.host import ConsoleOptions
    from riskrank.serving.http import console_host, create_app

    demo = ToolRegistry.load(demo_registry_path())
    picked = ["search_files", "get_file_metadata", "share_file_link", "read_file", "get_weather", "transfer_funds"]
    labels, review = persona_audit(demo.subset([n for n in picked if n in demo]), tmp_path / "labels.json")
    hostile = {"tools": [
        {"name": "render_note", "description": "Show a note. <script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"},
        {"name": "read_file", "description": "Read a file and return its text."}]}
    (tmp_path / "tools.json").write_text(json.dumps(hostile))
    live = LiveCatalogue.from_spec(ArtefactSpec(str(tmp_path / "tools.json"), mode="dense+rule"), HashEncoder())
    app = with_console(create_app(live, token=TOKEN), create_console(console_host(live), ConsoleOptions(labels=labels)))
    with ServerThread(app) as srv:
        yield srv.url + "/console", labels, review


def test_review_two_tools_and_apply(served, browser, tmp_path):
    from riskrank.audit import apply_review, read_review

    url, labels, review = served
    queue = read_review(review)
    assert len(queue) >= 3
    browser.login(url, "carol")
    browser.get(url + "/review")
    assert browser.css("#progress-text").text == f"0 of {len(queue)}"
    assert browser.css("#apply").get_attribute("disabled") is not None
    decided = {}
    for entry, (level, reason) in zip(queue[:2], ((2, "reads metadata only"), (4, "shares a file with anyone")), strict=False):
        card = browser.css(f'article.review[data-tool="{entry["name"]}"]')
        assert all(a in card.text for a in ("strict", "lenient", "noisy")) and "keyword level" in card.text
        card.find_element("css selector", f"input[name=level][value='{level}']").click()
        card.find_element("css selector", "input[name=reason]").send_keys(reason)
        browser.submit(card.find_element("css selector", "button.save"))
        assert browser.css("p.flash").text.startswith(f"Saved L{level} for {entry['name']}")
        decided[entry["name"]] = (level, reason)
    assert browser.css("#progress-text").text == f"2 of {len(queue)}"
    saved = {e["name"]: e for e in read_review(review)}
    assert {n: (saved[n]["risk_level"], saved[n]["note"]) for n in decided} == decided
    assert {saved[n]["reviewer"] for n in decided} == {"carol"}
    assert all(e["risk_level"] is None for n, e in saved.items() if n not in decided)
    # Apply: the labels are what `riskrank audit --apply-review` writes from the same review file.
    expected = tmp_path / "expected.json"
    shutil.copy(labels, expected)
    assert apply_review(expected, review) == (2, len(queue) - 2)
    browser.submit(browser.css("#apply"))
    assert browser.css("p.flash").text == f"Applied 2 decision(s) to labels.json; {len(queue) - 2} tool(s) still await review."
    assert json.loads(labels.read_text()) == json.loads(expected.read_text())
    got = json.loads(labels.read_text())
    assert {n: (got[n]["risk_level"], got[n]["resolution"], got[n]["reviewer"]) for n in decided} == \
        {n: (lvl, "reviewed", "carol") for n, (lvl, _) in decided.items()}
    assert "applied" in browser.css(f'article.review[data-tool="{queue[0]["name"]}"] .meta').text
    # The agreement heat map of the same audit.
    r = httpx.get(url + "/pictures/agreement.png", cookies=browser.cookies(), timeout=PICTURE_TIMEOUT)
    assert r.status_code == 200 and r.content[:4] == b"\x89PNG"


def test_a_script_in_a_description_is_text(served, browser):
    url, _, _ = served
    browser.login(url, "dave")
    browser.get(url + "/catalogue?task=show+a+note&k=2")
    cell = browser.css('#tools tr[data-name="render_note"] td.desc')
    assert cell.text == 'Show a note. <script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    assert browser.driver.execute_script("return window.__pwned === undefined") is True
    assert not browser.all("main script") and not browser.all("main img[src=x]")
    assert "&lt;script&gt;" in browser.driver.page_source


def test_console_in_a_streamable_http_gateway(tmp_path, browser):
    """Over streamable HTTP the console is at /console of the MCP server's own port: its login
    takes the admin token; /mcp keeps its bearer token; neither opens the other."""
    admin = "console-admin-token-0123456789"
    (tmp_path / "admin").write_text(admin)
    argv = gateway_argv(tmp_path, "--transport", "streamable-http", "--port", "0", "--admin-token-file", str(tmp_path / "admin"))
    env = {**python_env(), "RISKRANK_TOKEN": TOKEN}
    errlog = tmp_path / "http.err"
    with errlog.open("w") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        url = console_url(errlog)
        mcp = wait_for_line(errlog, "streamable HTTP at ").split("streamable HTTP at ", 1)[1].split()[0]
        assert url == mcp.removesuffix("/mcp") + "/console"
        assert "auth: the admin token" in wait_for_line(errlog, "console at ")
        r = httpx.get(url + "/catalogue", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 303 and r.headers["location"] == "/console/login"  # the bearer token opens no console page
        r = httpx.post(mcp, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Authorization": f"Bearer {admin}"})
        assert r.status_code == 401  # nor does the admin token open the MCP endpoint
        browser.login(url, "erin", token=admin)
        wait_for_line(errlog, "find_tools over")  # the gateway serves while its upstream starts; then the catalogue
        browser.get(url + "/catalogue")
        assert "read_notes" in browser.names("#tools tbody tr")
        cookie = next(c for c in browser.driver.get_cookies() if c["name"].startswith("riskrank_console_"))
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
        assert admin not in cookie["value"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=GUARD_S)
    assert "Traceback" not in errlog.read_text()
    assert not re.search(re.escape(admin), errlog.read_text())
