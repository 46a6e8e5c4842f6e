"""Permission categories (Appendix B) match whole words and stems, not raw substrings; the
keyword annotator reads MCP annotations as evidence; unlabelled tools fail closed."""

from __future__ import annotations

import numpy as np
import pytest

from riskrank.registry import Tool
from riskrank.risk import (
    PERMISSION_CATEGORIES,
    fail_closed_levels,
    keyword_level,
    level_from_score,
    normalise_text,
    normalised_risk,
    permission_categories,
    permission_matrix,
    split_name,
)


def test_five_categories_of_the_paper():
    assert PERMISSION_CATEGORIES == (
        "shell_execution", "file_write", "network_access", "credential_handling", "code_execution",
    )


# The reference implementation's substring match fires on every one of these.
@pytest.mark.parametrize(
    ("name", "description", "not_category"),
    [
        ("evaluate_model", "Run an evaluation of the model on a benchmark.", "code_execution"),
        ("score_essay", "Evaluation of essays by rubric.", "code_execution"),
        ("medeval_lookup", "Look up medeval scores.", "code_execution"),
        ("refill_prescription", "Refill a prescription at the pharmacy.", "code_execution"),
        ("get_transcript", "Fetch the transcript of a meeting.", "code_execution"),
        ("launch_campaign", "Execute a marketing campaign across channels.", "code_execution"),
        ("run_marathon_plan", "Run a training plan for a marathon.", "code_execution"),
        ("command_center", "Show the dashboard.", "code_execution"),
        ("token_economics", "Explain tokenomics of a project.", "code_execution"),
        ("show_curl_docs", "Show documentation.", "shell_execution"),
        ("get_bashful_quote", "Quote of the day from Bashful.", "shell_execution"),
        ("add_catalogue", "Add a product to the catalogue.", "code_execution"),
        ("bookshelf", "Organise a bookshelf.", "shell_execution"),
        ("undeleted_items", "Count items.", "network_access"),
        ("passage_finder", "Find a passage in a book.", "credential_handling"),
    ],
)
def test_substring_traps_do_not_match(name, description, not_category):
    assert not_category not in permission_categories(name, description)


@pytest.mark.parametrize(
    ("name", "description", "category"),
    [
        ("delete_file", "Remove a file from disk.", "file_write"),
        ("deleteFile", "Remove it.", "file_write"),
        ("save_document", "Save text to a file.", "file_write"),
        ("overwrite_config", "Overwrite the settings.", "file_write"),
        ("run_code", "Run the snippet.", "code_execution"),
        ("python_exec", "Execute the given python code and return stdout.", "code_execution"),
        ("sandbox", "Evaluate an expression with eval.", "code_execution"),
        ("run_script", "Run a deployment script.", "code_execution"),
        ("bash", "Run a bash command on the host.", "shell_execution"),
        ("terminal", "Open a shell and run commands.", "shell_execution"),
        ("get_token", "Get an OAuth token for the user.", "credential_handling"),
        ("reset_password", "Reset a user's password.", "credential_handling"),
        ("store_api_key", "Store an API key.", "credential_handling"),
        ("upload_file", "Upload a file to the given URL.", "network_access"),
        ("fetch_url", "Download the page at a URL.", "network_access"),
        ("http_get", "Send an HTTP request.", "network_access"),
    ],
)
def test_positive_cases(name, description, category):
    assert category in permission_categories(name, description)


def test_name_alone_is_evidence():
    assert permission_categories("run_code", "Does a thing.") == frozenset({"code_execution"})
    assert permission_categories("delete_file", "Does a thing.") == frozenset({"file_write"})


def test_many_categories_are_counted():
    cats = permission_categories("deploy", "Run a bash command that uploads a script with your password.")
    assert cats >= {"shell_execution", "network_access", "credential_handling", "code_execution"}


def test_safe_tools_have_no_category():
    for name, desc in [("get_weather", "Current weather for a city."), ("search_flights", "Find flights."),
                       ("translate_text", "Translate text between languages.")]:
        assert permission_categories(name, desc) == frozenset()


def test_split_and_normalise():
    assert split_name("deleteFile") == "delete File"
    assert split_name("get_HTTPResponse") == "get HTTP Response"
    assert split_name("a-b.c_d") == "a b c d"
    assert normalise_text("Run_Code!  NOW") == "run code now"


def test_permission_matrix():
    P = permission_matrix([frozenset({"file_write"}), frozenset(), frozenset({"shell_execution", "code_execution"})])
    assert P.shape == (3, 5) and P.dtype == bool
    assert P.tolist() == [[False, True, False, False, False], [False] * 5, [True, False, False, False, True]]
    assert permission_matrix([]).shape == (0, 5)


def test_risk_target_and_inverse():
    assert normalised_risk(np.array([1, 2, 3, 4, 5])).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert level_from_score(np.array([0.0, 0.24, 0.5, 0.8, 1.0, -3.0, 7.0])).tolist() == [1, 2, 3, 4, 5, 1, 5]


# -- keyword annotator with MCP annotations ------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "description"),
    [("list_items", "List the items."), ("get_weather", "Weather for a city."), ("noop", "Nothing at all.")],
)
def test_destructive_hint_is_never_low(name, description):
    assert keyword_level(name, description)[0] < 4
    level, evidence = keyword_level(name, description, {"destructiveHint": True})
    assert level >= 4 and "mcp: destructiveHint" in evidence
    # destructiveHint wins over a contradicting readOnlyHint
    assert keyword_level(name, description, {"destructiveHint": True, "readOnlyHint": True})[0] >= 4


def test_read_only_hint_lowers_nothing_unless_trusted():
    # by default a hint only raises: the level is the description's own evidence
    level, evidence = keyword_level("read_patient_record", "Read a patient's medical records.", {"readOnlyHint": True})
    assert level == keyword_level("read_patient_record", "Read a patient's medical records.")[0] == 3
    assert "mcp: readOnlyHint (not trusted: hints only raise a level)" in evidence
    # trusted, an uncontradicted hint caps at L2
    level, evidence = keyword_level("read_patient_record", "Read a patient's medical records.", {"readOnlyHint": True},
                                    trust_annotations=True)
    assert level == 2 and "mcp: readOnlyHint caps L3 at L2" in evidence
    level, _ = keyword_level("list_contacts", "List my contacts.", {"readOnlyHint": True}, trust_annotations=True)
    assert level <= 2


@pytest.mark.parametrize("trust", [False, True])
def test_read_only_hint_does_not_hide_destruction_or_code(trust):
    assert keyword_level("purge_bucket", "Delete every object in a bucket.", {"readOnlyHint": True}, trust_annotations=trust)[0] >= 4
    assert keyword_level("python", "Execute the given python code.", {"readOnlyHint": True}, trust_annotations=trust)[0] >= 4


def test_the_trusted_read_only_level_is_what_trust_annotations_serves():
    """trusted_read_only_level (what the level benchmark re-reads as --trust-annotations) caps an
    uncontradicted readOnlyHint at L2, never below the capability floor, and leaves a tool whose
    words contradict it."""
    from riskrank.registry import make_tool
    from riskrank.risk import trusted_read_only_level

    reads = make_tool("list_contacts", "List my contacts.", where="test")
    assert trusted_read_only_level(reads, 3, 1) == 2
    assert trusted_read_only_level(reads, 1, 1) == 1
    assert trusted_read_only_level(reads, 5, 4) == 4
    assert trusted_read_only_level(make_tool("write_note", "Write a note to the notes database.", where="test"), 3, 1) == 3


def test_read_only_hint_contradicted_by_a_write_is_ignored():
    level, evidence = keyword_level("write_note", "Write a note to the notes database.", {"readOnlyHint": True},
                                    trust_annotations=True)
    assert level >= 3 and "mcp: readOnlyHint contradicted by the description, ignored" in evidence


# Destructive tools as MCP servers describe them (the shapes of filesystem, process, container,
# storage and database servers' tool lists), each with the readOnlyHint a careless or hostile
# server might attach. Every one must stay high risk, trusted hint or not.
DESTRUCTIVE = [
    ("purge_directory", "Deletes all files and subfolders in a directory recursively.", 4),
    ("wipe_disk", "Wipes the disk: overwrites every sector with zeros.", 5),
    ("cleanup", "Cleans up the workspace by running rm -rf on the build and source folders.", 5),
    ("encrypt_all_files", "Encrypts every file in the project folder and discards the key.", 5),
    ("kill_process", "Terminate a running process by PID. Use with caution as this will forcefully kill the process.", 4),
    ("kill_processes", "Kills all running processes of the user.", 4),
    ("shred_documents", "Shreds the documents folder so nothing can be recovered.", 5),
    ("nuke_project", "Nukes the project folder and its history.", 5),
    ("destroy_backups", "Destroys all backups in the bucket.", 4),
    ("docker_rm", "Force-remove a container and its anonymous volumes.", 4),
    ("kubectl_delete", "Delete Kubernetes resources by name, label or from a manifest file.", 4),
    ("drop_table", "Drop a table from the database. This cannot be undone.", 4),
    ("factory_reset", "Factory reset the device, erasing all user data and settings.", 5),
    ("ransom", "Encrypt the user's home directory with a random key, then delete the key.", 5),
]


@pytest.mark.parametrize(("name", "description", "floor"), DESTRUCTIVE)
@pytest.mark.parametrize("trust", [False, True])
def test_destructive_descriptions_stay_high_whatever_the_hint(name, description, floor, trust):
    level, evidence = keyword_level(name, description, {"readOnlyHint": True}, trust_annotations=trust)
    assert level >= floor, evidence
    tool = Tool(name, description, annotations={"readOnlyHint": True})
    # unlabelled: fail closed (0 = treated as L5), trusted or not, because the description contradicts the hint
    assert fail_closed_levels([tool], trust_annotations=trust).tolist() == [0]


@pytest.mark.parametrize(
    ("name", "description"),
    [("list_directory", "Get a detailed listing of all files and directories in a specified path."),
     ("read_file", "Read the complete contents of a file from the file system."),
     ("get_weather", "Current weather for a city."),
     ("search_notes", "Searches the user's notes.")],
)
def test_benign_read_tools_are_not_flagged(name, description):
    assert keyword_level(name, description)[0] <= 2
    assert keyword_level(name, description, {"readOnlyHint": True}, trust_annotations=True)[0] <= 2


def test_open_world_hint_raises_to_l2_and_idempotent_changes_nothing():
    assert keyword_level("noop", "Nothing at all.", {"openWorldHint": True})[0] == 2
    assert keyword_level("noop", "Nothing at all.", {"idempotentHint": True}) == keyword_level("noop", "Nothing at all.")
    # only explicit values count
    assert keyword_level("noop", "Nothing at all.", {"destructiveHint": False})[0] == 1


def test_keyword_levels_and_evidence():
    assert keyword_level("get_weather", "Weather for a city.") == (1, [])
    lvl, ev = keyword_level("delete_file", "Delete a file.")
    assert lvl == 4 and ev[0] == "L4: 'delete'" and "perm: file_write" in ev
    assert keyword_level("wipe_disk", "Format the disk and wipe everything.")[0] == 5
    assert keyword_level("bash", "Run a command.")[0] >= 4  # shell execution floor


def test_fail_closed_levels():
    tools = [
        Tool("a", "Reads a file.", risk_level=3, annotations={"destructiveHint": True}),  # audited level stays
        Tool("b", "Reads a file.", annotations={"readOnlyHint": True}),    # stays 0 unless trusted
        Tool("c", "Reads a file.", annotations={"destructiveHint": True}),  # -> L5
        Tool("d", "Reads a file."),                                       # stays 0 (the filter treats it as L5)
        Tool("e", "Reads a file.", annotations={"readOnlyHint": True, "destructiveHint": True}),  # destructive wins -> L5
        Tool("f", "Reads a file.", risk_level=1, annotations={}),
        Tool("g", "Deletes a file.", annotations={"readOnlyHint": True}),  # contradicted: never lowered
    ]
    assert fail_closed_levels(tools).tolist() == [3, 0, 5, 0, 5, 1, 0]
    assert fail_closed_levels(tools, trust_annotations=True).tolist() == [3, 1, 5, 0, 5, 1, 0]
