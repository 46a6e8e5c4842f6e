"""The dangerous capabilities a tool's definition shows (riskrank.capabilities): found with their
rubric floor and ATT&CK technique, and not found where words only look dangerous."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("name", "description", "capability", "floor"), [
    ("run_shell_command", "Execute a bash command on the host and return its output.", "host_execution", 5),
    ("exec_in_pod", "Execute a command in a pod", "code_execution", 4),
    ("aws_creds", "Extract AWS credentials from configuration files", "credential_harvesting", 5),
    ("dns_out", "Exfiltrate data through DNS queries", "exfiltration", 5),
    ("ssh", "Locate and exfiltrate SSH private keys", "credential_harvesting", 5),
    ("get-env", "Prints all environment variables of the server", "credential_access", 4),
    ("get_secret", "Get the value of a secret from the key vault", "credential_access", 4),
    ("keys", "Records all keystrokes typed by the user", "surveillance", 5),
    ("screen", "Capture the entire screen of the user's desktop", "surveillance", 5),
    ("transfer_money", "Transfer money to another account", "financial", 4),
    ("place_order", "Place an order.", "financial", 4),
    ("order_food", "Places an order for food from a restaurant", "financial", 4),
    ("purchase_insurance", "Purchase insurance", "financial", 4),
    ("send_email", "Send an email to any recipient", "outbound_send", 3),
    ("clear_logs", "Clear the Windows security event logs", "defense_evasion", 5),
    ("grant_role", "Grant a role to a user in the project", "permission_change", 4),
    ("drop_database", "Drop the database and everything in it", "mass_destruction", 4),
    ("delete_file", "Permanently delete a file from the file system.", "destruction", 3),
    ("install_plugin", "Install a plugin by its ID", "software_install", 4),
    ("add_key", "Adds an entry to ~/.ssh/authorized_keys so the host can be reached later", "persistence", 5),
])
def test_capabilities_are_found_with_their_floor_and_technique(name, description, capability, floor) -> None:
    from riskrank.capabilities import capability_floor, detect_capabilities

    hits = detect_capabilities(name, description)
    assert capability in [h.key for h in hits], [h.key for h in hits]
    assert capability_floor(hits) >= floor
    hit = next(h for h in hits if h.key == capability)
    assert " like T1" in hit.evidence() and f"at least L{hit.floor}" in hit.evidence()


@pytest.mark.parametrize(("name", "description"), [
    ("hover", "Hover over element on page"), ("a_minus_b", "a minus b"), ("translate_text", "Translate text to another language"),
    ("echo", "Echoes back the input"), ("take_screenshot", "Take a screenshot of the current page"),
    ("detect_keylogger", "Detect whether a keylogger is running on the system"),
    ("get_plan", "Get a plan: the resources it would create, update or delete"),  # a read names actions it reports on
    ("list_refunds", "List all refunds for a payment"), ("update_datasource", "Update a data source's non-secret fields"),
    ("list_branches", "List branches. Use get_connection_string to connect."),  # another tool named, not this one's action
    ("archive", "This tool does not delete anything"),
    ("get_purchase_history", "Get the purchase history of a customer"), ("purchase_schedule", "Design tool for purchase schedule"),
    ("calculate_tax", "Calculates the sales tax for a given purchase amount"),
])
def test_what_only_looks_dangerous_has_no_capability(name, description) -> None:
    from riskrank.capabilities import detect_capabilities

    assert detect_capabilities(name, description) == []


def test_reading_is_bounded() -> None:
    """A 100 kB description costs no more than its first MAX_CHARS characters and finds the same
    capabilities."""
    from riskrank.capabilities import MAX_CHARS, detect_capabilities

    long = "Deletes the record. " + "padding words here. " * 6000
    assert len(long) > 100_000
    assert detect_capabilities("x", long) == detect_capabilities("x", long[:MAX_CHARS])



def test_scan_shows_what_each_tool_can_do() -> None:
    """riskrank scan prints each capability with its floor and technique (and in --json), and they
    do not change the exit status: they are evidence, not a poisoning verdict."""
    import json

    from click.testing import CliRunner

    from riskrank.cli import main as cli

    path = "examples/registries/mcp_filesystem_tools_list.json"
    out = CliRunner().invoke(cli, ["scan", path])
    assert out.exit_code == 0, out.output
    assert ("capability run_shell_command: runs arbitrary commands on the host (execution, like T1059 Command and Scripting "
            "Interpreter): 'run shell command' -> at least L5") in out.output
    assert "capability list_directory" not in out.output
    doc = json.loads(CliRunner().invoke(cli, ["scan", path, "--json"]).output)
    caps = {t["name"]: [c["capability"] for c in t["capabilities"]] for t in doc["tools"]}
    assert caps["run_shell_command"] == ["host_execution"] and caps["get_file_info"] == []


def test_scan_reads_each_tool_by_its_own_words(tmp_path) -> None:
    """An opening every tool of a server shares ("... lets users delete files and run shell
    commands") is the server's: a tool whose own words only list files shows no capability."""
    import json

    from click.testing import CliRunner

    from riskrank.capabilities import detect_capabilities
    from riskrank.cli import main as cli
    from riskrank.levels import own_capabilities
    from riskrank.registry import make_tool

    pre = "This tool belongs to the Acme box. It lets users delete files and run shell commands on the host. "
    own = {"ls": "List the files of the current directory.", "cat": "Show a file's text.", "rm": "Remove a file for good."}
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": [{"name": n, "description": pre + d} for n, d in own.items()]}))
    doc = json.loads(CliRunner().invoke(cli, ["scan", str(path), "--json"]).output)
    caps = {t["name"]: [c["capability"] for c in t["capabilities"]] for t in doc["tools"]}
    assert caps["ls"] == [] and caps["cat"] == [] and "destruction" in caps["rm"]
    whole = [detect_capabilities(n, pre + d) for n, d in own.items()]
    assert all(any(h.key == "host_execution" for h in hits) for hits in whole)  # read whole, every tool runs commands
    assert own_capabilities([make_tool(n, pre + d, where="t") for n, d in own.items()])[0] == []


def test_one_scan_for_all_capabilities_drops_no_hit() -> None:
    """detect_capabilities skips a capability's own patterns where the union of them all finds
    nothing: on every real MCP tool it finds what a scan per capability finds."""
    from riskrank.capabilities import (
        _ANYWHERE,
        _RAW,
        _SCOPED,
        _SUBSUMES,
        CAPABILITIES,
        Clauses,
        _after_subject,
        _first,
        _first_sentences,
        _strip_tool_names,
        detect_capabilities,
        name_reads,
        scoped_text,
    )
    from riskrank.datasets.rubric import load_mcp_set
    from riskrank.risk import split_name

    found = 0
    for t in load_mcp_set().tools:
        d = t.description or ""
        scoped, whole, raw = scoped_text(t.name, d, t.parameters), Clauses.of(split_name(t.name) + " " + _strip_tool_names(d)), d.lower()
        each = set()
        for cap in CAPABILITIES:
            if name_reads(t.name) and cap.acts:  # an action only where the description opens with it
                quote = _SCOPED[cap.key].match(Clauses.of(_after_subject(t.name, next(iter(_first_sentences(d)), ""))))
            else:
                quote = _first(_SCOPED[cap.key], scoped)
            quote = quote or (_first(_ANYWHERE[cap.key], whole) if cap.key in _ANYWHERE else None)
            quote = quote or (_RAW[cap.key].search(raw) if cap.key in _RAW else None)
            if quote:
                each.add(cap.key)
        each -= {mild for severe, mild in _SUBSUMES.items() if severe in each}
        assert {h.key for h in detect_capabilities(t.name, d, t.parameters)} == each, t.name
        found += bool(each)
    assert found > 100


@pytest.mark.parametrize(("name", "description", "capability"), [
    ("host_runner", "No sandbox. Executes arbitrary shell commands on the host.", "host_execution"),
    ("clean_folder", "No undo: deletes every file in the folder", "mass_destruction"),
])
def test_a_negation_counts_only_in_its_own_clause(name, description, capability) -> None:
    """"No sandbox." negates nothing in the sentence after it; "does not delete" still negates."""
    from riskrank.capabilities import detect_capabilities

    assert capability in [h.key for h in detect_capabilities(name, description)]
    assert detect_capabilities("list_users", "Lists users. Does not delete anything.") == []


@pytest.mark.parametrize(("name", "description", "capability"), [
    ("list_files", "Deletes files older than a day.", "destruction"),
    ("view_page", "Run the given shell command on the host.", "host_execution"),
    # a subject that names the tool comes before the verb: the tool itself, "this tool", "it"
    ("show", "dbt show executes an arbitrary SQL statement against the database.", "code_execution"),
    ("get_file", "This tool deletes the file at the given path.", "destruction"),
    ("view_page", "It runs the given shell command on the host.", "host_execution"),
])
def test_a_name_that_reads_takes_the_action_its_description_opens_with(name, description, capability) -> None:
    """A read name (``list_``, ``view_``) does not hide what the description's first words say the
    tool does; the actions named later ("the resources a plan would delete") stay a report's."""
    from riskrank.capabilities import detect_capabilities

    assert capability in [h.key for h in detect_capabilities(name, description)]
    assert detect_capabilities("get_plan", "Returns the resources a plan would delete.") == []
    assert detect_capabilities("list_files", "Lists the files of a folder. It deletes nothing.") == []
    # the subject's own clause: after a clause end the sentence no longer opens with the tool
    assert detect_capabilities("list_files", "List files; deletes nothing.") == []
    assert detect_capabilities("get_file", "It does not delete the file.") == []


def test_a_match_never_splices_two_sentences_or_the_parameter_names() -> None:
    """A verb of one sentence and an object of the next (or of a parameter's name) are not one act."""
    from riskrank.capabilities import detect_capabilities

    params = {"type": "object", "properties": {"access_token": {"type": "string"}}}
    assert detect_capabilities("fetch_invoice", "Retrieve the invoice for a booking", params) == []
    assert detect_capabilities("lint_ssh_config", "Checks the config for syntax errors. Only the config file is read; "
                                                  "private keys are not opened.") == []
    # inside one sentence the same words still count
    assert [h.key for h in detect_capabilities("fetch_token", "Retrieve the access token for a booking")] == ["credential_access"]
