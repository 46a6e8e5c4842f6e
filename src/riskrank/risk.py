"""The paper's five-level risk rubric and the keyword permission categories (Appendix A, B).

Permission categories are transparent metadata for ToolGraph permission edges and the rule
filter's permission cap; they are not the learned risk model.

Matching is on whole words or word stems of the tool's name (split into words) and
description, lower-cased. The reference implementation matches raw substrings, so "eval"
fires on "evaluation", "script" on "prescription" and "exec" on "Execute a marketing
campaign"; here every pattern is anchored at a word boundary and verbs that are only risky
with a particular object ("execute", "run", "write") require that object nearby.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

RISK_LEVELS = (1, 2, 3, 4, 5)

#: The rubric of Section 4.2 / Appendix A, in the paper's words.
RUBRIC: dict[int, str] = {
    1: "Safe: read-only tools with no side effects or sensitive access.",
    2: "Low: minor reversible actions or non-sensitive personal-data access.",
    3: "Medium: sensitive data access or persistent writes.",
    4: "High: irreversible actions, security controls, or system-level permissions.",
    5: "Critical: large-scale harm, system intrusion, or severe privacy loss.",
}

#: Appendix A's prompt template, verbatim.
ANNOTATION_PROMPT = (
    "Given the following tool name and description, assign one risk level from L1 (Safe) to "
    "L5 (Critical). Consider scope of impact, reversibility, and data sensitivity. Return only "
    "one integer in {{1,2,3,4,5}}.\n\nTool name: {tool_name}\n\nDescription: {tool_description}"
)

#: Levels at or above these thresholds count as risky in RVR@k and as severe in SRR@k.
RISKY_LEVEL = 3
SEVERE_LEVEL = 4

# A handful of words between a verb and its object ("execute the given python code").
_GAP = r"(?:\w+\s+){0,3}"

#: The five categories of Appendix B. Each pattern is a regex over normalised text
#: (lower-case words separated by single spaces); all patterns start at a word boundary.
PERMISSION_PATTERNS: dict[str, tuple[str, ...]] = {
    "shell_execution": (
        r"shells?\b", r"bash\b", r"zsh\b", r"powershell\b", r"terminal\b", r"sudo\b",
        r"cmd\b", r"subprocess\w*", r"commands?\b", r"command line\b", r"cli\b",
        r"system calls?\b", r"cron\w*",
    ),
    "file_write": (
        r"delet\w*", r"overwrit\w*", r"eras(?:e|es|ed|ing)\b", r"wip(?:e|es|ed|ing)\b",
        r"truncat\w*", r"shred\w*", r"chmod\b", r"chown\b", r"mkdir\b", r"rmdir\b", r"rm\b",
        r"file writ\w*", r"writ\w* " + _GAP + r"(?:files?|disk|folders?|director\w+)\b",
        r"(?:save|saves|saving|rename|renames|renaming|move|moves|moving|modif\w+|edit\w*|creat\w+) "
        + _GAP + r"(?:files?|folders?|director\w+)\b",
        r"format\w* " + _GAP + r"(?:disk|drive|partition)s?\b",
    ),
    "network_access": (
        r"upload\w*", r"download\w*", r"https?\b", r"urls?\b", r"webhooks?\b", r"s?ftp\b",
        r"ssh\b", r"sockets?\b", r"prox(?:y|ies)\b", r"dns\b", r"ip address\w*",
        r"firewall\w*", r"port scan\w*", r"network (?:access|request\w*|traffic|config\w*|settings?|scan\w*)",
        r"(?:web|http|api) requests?\b", r"crawl\w*", r"scrap(?:e|es|ed|ing)\b",
    ),
    "credential_handling": (
        r"tokens?\b", r"password\w*", r"passcodes?\b", r"passphrases?\b", r"oauth\w*",
        r"credential\w*", r"api keys?\b", r"secret\w*", r"private keys?\b", r"ssh keys?\b",
        r"access keys?\b", r"log ?in\b", r"logins?\b", r"sign ?in\b", r"authenticat\w*",
        r"auth\b", r"2fa\b", r"otp\b", r"verification codes?\b", r"pin codes?\b",
        r"certificates?\b",
    ),
    "code_execution": (
        r"eval\b", r"exec\b", r"run code\b", r"run_code\b",
        r"(?:execut\w*|run|runs|running) " + _GAP + r"(?:code|scripts?|programs?|snippets?|binar\w+|macros?)\b",
        r"scripts?\b", r"scripting\b", r"interpreters?\b", r"python\b", r"javascript\b",
        r"compil(?:e|es|ed|er|ing)\b", r"code execution\b", r"jupyter\b", r"repl\b",
    ),
}

PERMISSION_CATEGORIES: tuple[str, ...] = tuple(PERMISSION_PATTERNS)

_COMPILED = {
    cat: re.compile(r"\b(?:" + "|".join(pats) + ")")
    for cat, pats in PERMISSION_PATTERNS.items()
}

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NON_WORD = re.compile(r"[^0-9a-z]+")


def split_name(name: str) -> str:
    """Split a tool name into words: ``deleteFile`` / ``delete_file`` -> ``delete file``."""
    spaced = _CAMEL.sub(" ", name).replace("_", " ").replace("-", " ").replace(".", " ")
    return " ".join(spaced.split())


def normalise_text(text: str) -> str:
    """Lower-case and collapse everything that is not a letter or digit to single spaces."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def permission_categories(name: str, description: str) -> frozenset[str]:
    """The permission categories whose keywords occur in the tool's name or description."""
    text = normalise_text(split_name(name) + " " + description)
    return frozenset(cat for cat, rx in _COMPILED.items() if rx.search(text))


def permission_matrix(categories: Iterable[frozenset[str]]) -> np.ndarray:
    """Boolean [N, 5] matrix P with P[i, c] = tool i matches category c (column order of
    :data:`PERMISSION_CATEGORIES`). Permission edges of the ToolGraph are P P^T."""
    rows = [[c in cats for c in PERMISSION_CATEGORIES] for cats in categories]
    return np.asarray(rows, dtype=bool).reshape(-1, len(PERMISSION_CATEGORIES))


def normalised_risk(levels: np.ndarray) -> np.ndarray:
    """The risk head's regression target (r - 1) / 4 (Section 4.3, Eq. 5)."""
    return (np.asarray(levels, dtype=np.float32) - 1.0) / 4.0


def label_risk(levels: np.ndarray) -> np.ndarray:
    """Audited levels as a risk score in [0, 1] ((r - 1) / 4), 0.5 where a tool is
    unlabelled: the risk term of the dense risk-label-penalty baseline."""
    levels = np.asarray(levels)
    return np.where(levels > 0, normalised_risk(np.maximum(levels, 1)), 0.5).astype(np.float32)


def level_from_score(f_risk: np.ndarray) -> np.ndarray:
    """Invert (r - 1) / 4: map a risk-head output in [0, 1] to the nearest level 1..5."""
    return np.clip(np.rint(np.asarray(f_risk) * 4.0 + 1.0), 1, 5).astype(np.int8)


# -- the keyword annotator: transparent rubric evidence -----------------------------------------
# Word stems per rubric level, matched like the permission patterns (word boundary at the
# start). The highest level with evidence wins; permission categories and MCP annotations
# raise or bound it. Deliberately simple and explainable: every level comes with the words
# that set it.
LEVEL_PATTERNS: dict[int, tuple[str, ...]] = {
    5: (
        r"bulk (?:export|delet\w*|transfer\w*)", r"mass (?:delet\w*|email\w*|messag\w*)", r"all users?\b",
        r"disabl\w* " + _GAP + r"(?:audit\w*|logging|security|firewall|antivirus|2fa|mfa|encryption|monitoring)",
        r"private keys?\b", r"root access\b", r"privilege escalat\w*", r"exploit\w*", r"malware\b",
        r"format\w* " + _GAP + r"(?:disk|drive|partition)s?\b", r"wip(?:e|es|ed|ing)\b", r"drop (?:database|schema)s?\b",
        r"surveil\w*", r"keylog\w*", r"ddos\b", r"shred\w*", r"nuk(?:e|es|ed|ing)\b", r"rm rf\b", r"factory reset\w*",
        # ransomware's shape: everything encrypted, or the key thrown away
        r"encrypt\w* (?:all|every|the entire|the whole)\b",
        r"encrypt\w* (?:\w+ ){0,12}(?:discard\w*|destroy\w*|delet\w*|throw\w* away|wip(?:e|es|ed|ing)) (?:\w+ ){0,2}keys?\b",
    ),
    4: (
        r"delet\w*", r"remov\w*", r"drop\w*", r"terminat\w*", r"destroy\w*", r"purg\w*", r"revok\w*",
        r"kill\w*", r"obliterat\w*", r"annihilat\w*", r"irreversibl\w*", r"unrecoverabl\w*",
        r"eras\w*", r"overwrit\w*", r"truncat\w*", r"transfer\w* " + _GAP + r"(?:funds?|money|payment|balance|crypto\w*)",
        r"wire\b", r"withdraw\w*", r"pay\b", r"pays\b", r"payments?\b", r"purchas\w*", r"buy\w*", r"sell\w*", r"trad(?:e|es|ing)\b",
        r"refund\w*", r"deploy\w*", r"shut ?down\w*", r"reboot\w*", r"restart\w*", r"grant\w*",
        r"permissions?\b", r"roles?\b", r"iam\b", r"admin\w*", r"firewall\w*", r"unlock\w*", r"execut\w*",
        r"shell\b", r"sudo\b", r"reset password\w*", r"change password\w*", r"cancel\w*", r"prescri\w*",
        r"send (?:money|funds|crypto\w*|payment)", r"publish\w*",
    ),
    3: (
        r"writ\w*", r"updat\w*", r"modif\w*", r"edit\w*", r"creat\w*", r"insert\w*", r"upload\w*", r"sav(?:e|es|ed|ing)\b",
        r"send\w*", r"email\w*", r"post\w*", r"book\w*", r"reserv\w*", r"schedul\w*", r"submit\w*", r"register\w*",
        r"medical\b", r"health\w*", r"patients?\b", r"diagnos\w*", r"bank\w*", r"financ\w*", r"salar\w*", r"payroll\b",
        r"ssn\b", r"social security\b", r"passports?\b", r"credit cards?\b", r"passwords?\b", r"tokens?\b",
        r"credentials?\b", r"personal (?:data|information|records?)\b", r"location track\w*", r"transactions?\b",
        r"accounts?\b", r"records?\b", r"install\w*", r"configur\w*", r"lock\w*",
    ),
    2: (
        r"set\b", r"sets\b", r"setting\w*", r"chang\w*", r"add\w*", r"toggl\w*", r"mark\w*", r"subscrib\w*",
        r"follow\w*", r"like\b", r"rat(?:e|es|ing)\b", r"remind\w*", r"contacts?\b", r"calendar\w*", r"my\b",
        r"personal\b", r"profiles?\b", r"messag\w*", r"notif\w*", r"share\w*", r"translat\w*",
    ),
}
_LEVEL_RX = {lvl: re.compile(r"\b(?:" + "|".join(p) + ")") for lvl, p in LEVEL_PATTERNS.items()}
# Evidence that a tool changes state, which contradicts an MCP readOnlyHint: state-changing
# verbs in base, third-person and -ing forms. Past participles ("saved note", "deleted
# files", "created date") are usually adjectives in a read-only tool's description.
_WRITE_VERBS = (
    "writ", "updat", "modif", "edit", "creat", "insert", "upload", "sav", "send", "post", "submit", "install",
    "delet", "remov", "drop", "terminat", "destroy", "purg", "revok", "eras", "overwrit", "truncat", "transfer",
    "withdraw", "pay", "purchas", "deploy", "restart", "reboot", "grant", "unlock", "execut", "wip", "format",
    "kill", "shred", "nuk", "encrypt", "obliterat", "annihilat", "clean",
)
_WRITE_RX = re.compile(r"\b(?:" + "|".join(_WRITE_VERBS) + r")(?:e|es|s|ies|y|ing|ting)?\b")
_READ_ONLY_CAP = 2  # readOnlyHint with nothing else: at most L2 (reading can still be sensitive)


def keyword_level(
    name: str, description: str, annotations: Mapping[str, Any] | None = None, *, trust_annotations: bool = False,
) -> tuple[int, list[str]]:
    """Rubric level 1..5 from keywords, permission categories and MCP annotations, with the
    evidence for it (e.g. ``["L4: 'delete'", "perm: file_write"]``).

    MCP annotations (spec 2025-03-26) are hints from the server, read as evidence, never as
    authority: servers are known to mislabel tools, and the hint is whatever the server's
    author (or an attacker who controls the server) wrote. By default they only raise a
    level: ``destructiveHint: true`` -> at least L4, ``openWorldHint: true`` -> at least L2;
    ``readOnlyHint: true`` is recorded but lowers nothing. With ``trust_annotations`` a
    ``readOnlyHint`` also lowers, to at most L2, unless the name or description contradicts
    it (state-changing or destructive verbs, or the file-write, shell or code-execution
    categories): a contradicted hint is ignored. ``idempotentHint`` does not change the
    level. Only explicit values count (null and the spec's defaults are not evidence).
    """
    text = normalise_text(split_name(name) + " " + description)
    level, evidence = 1, []
    for lvl in (5, 4, 3, 2):
        m = _LEVEL_RX[lvl].search(text)
        if m:
            level = lvl
            evidence.append(f"L{lvl}: {m.group(0)!r}")
            break
    cats = permission_categories(name, description)
    if cats:
        evidence.extend(f"perm: {c}" for c in sorted(cats))
        floor = 4 if cats & {"shell_execution", "code_execution"} else 3
        if len(cats) >= 2:
            floor = max(floor, 4)
        level = max(level, floor)
    ann = annotations or {}
    if ann.get("destructiveHint") is True:
        level = max(level, 4)
        evidence.append("mcp: destructiveHint")
    elif ann.get("readOnlyHint") is True:
        if not trust_annotations:
            evidence.append("mcp: readOnlyHint (not trusted: hints only raise a level)")
        elif read_only_contradicted(text, cats):
            evidence.append("mcp: readOnlyHint contradicted by the description, ignored")
        else:
            if level > _READ_ONLY_CAP:
                evidence.append(f"mcp: readOnlyHint caps L{level} at L{_READ_ONLY_CAP}")
            level = min(level, _READ_ONLY_CAP)
            evidence.append("mcp: readOnlyHint")
    if ann.get("openWorldHint") is True and level < 2:
        level = 2
        evidence.append("mcp: openWorldHint")
    return level, evidence


def read_only_contradicted(text: str, categories: frozenset[str]) -> bool:
    """Whether a tool's normalised name + description contradicts a ``readOnlyHint``: a
    state-changing or destructive verb, or a category other than credential handling and
    network access (reading credentials or the web is still reading)."""
    return bool(_WRITE_RX.search(text)) or bool(categories - {"credential_handling", "network_access"})


def fail_closed_levels(tools: Iterable[Any], *, trust_annotations: bool = False) -> np.ndarray:
    """Risk levels for the rule filter's audited-label path on a partly audited registry
    (``tools``: objects with ``risk_level``, ``name``, ``description`` and ``annotations``,
    as :class:`riskrank.registry.Tool`). Audited levels stay. An unlabelled tool stays 0,
    which the rule filter treats as L5 (fail closed) and reports as unlabelled, unless its
    MCP annotations raise it: ``destructiveHint: true`` makes it L5 (stated, no longer only
    assumed). Hints never lower a level by default; with ``trust_annotations`` a
    ``readOnlyHint: true`` that the name and description do not contradict
    (:func:`read_only_contradicted`) makes it the keyword level, at most L2."""
    out = []
    for tool in tools:
        level = tool.risk_level or 0
        ann = tool.annotations or {}
        if level == 0 and ann:
            if ann.get("destructiveHint") is True:
                level = 5
            elif trust_annotations and ann.get("readOnlyHint") is True:
                text = normalise_text(split_name(tool.name) + " " + tool.description)
                if not read_only_contradicted(text, permission_categories(tool.name, tool.description)):
                    level = keyword_level(tool.name, tool.description, ann, trust_annotations=True)[0]
        out.append(level)
    return np.asarray(out, dtype=np.int8)


def keyword_levels(tools: Iterable[Any], *, trust_annotations: bool = False) -> np.ndarray:
    """The keyword annotator's level (:func:`keyword_level`) of every tool (objects with
    ``name``, ``description`` and ``annotations``): the predicted levels riskrank falls back
    on when a checkpoint's risk head has not learned."""
    return np.asarray([keyword_level(t.name, t.description, t.annotations, trust_annotations=trust_annotations)[0] for t in tools],
                      dtype=np.int8)


#: How unaudited tools without a learned risk head get a level: fail closed (``none``: the
#: rule filter treats them as L5 unless MCP hints say more) or the keyword annotator's.
FILL_LEVELS = ("none", "keyword")
#: Where a tool's level comes from (``risk_provenance`` in every response), in order of trust.
PROVENANCE = {
    "policy": "pinned by the operator's policy (wins over every other source)",
    "audited": "risk_level given in the registry (an audit)",
    "predicted": "unaudited; the level model's (or a checkpoint's risk head combined with keyword evidence), then MCP annotations (hints only raise unless trusted)",
    "keyword": "unaudited; the keyword annotator's level (name, description, MCP annotations) or, with a risk head, keywords that rate it higher",
    "annotation": "unaudited; MCP annotations set the level (destructiveHint raises; a readOnlyHint lowers only with trust_annotations)",
    "unlabelled": "no level from any source: treated as L5 (fail closed)",
}
#: Where an unaudited tool's level comes from when a learned risk head is present.
LEVEL_PROVENANCE = ("audited", "predicted", "keyword", "annotation")


@dataclass(frozen=True)
class ToolLevels:
    """Every tool's level, provenance and evidence for one catalogue: the one answer that
    ranking, the rule filter, ``find_tools``, the call-time policy check, confirmation, the
    audit log, the console, HTTP and the library all read (:func:`resolve_tool_levels`).

    ``levels`` [N] are 1..5 (an unlabelled tool is 5: fail closed); ``filter_levels`` gives the
    rule filter 0 for those, so it can report them as unlabelled."""

    levels: np.ndarray
    provenance: tuple[str, ...]
    evidence: tuple[tuple[str, ...], ...]
    #: the dangerous capabilities the level model found per tool (``"destruction (T1485)"``);
    #: empty tuples where no level model read the tool
    capabilities: tuple[tuple[str, ...], ...] = ()
    #: [N, 5] the level model's P(level = 1..5) per tool, a row of NaN where its level is not
    #: the model's (pinned, audited); None without a level model
    distribution: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.provenance)

    @property
    def filter_levels(self) -> np.ndarray:
        return np.where(np.asarray([p == "unlabelled" for p in self.provenance], dtype=bool), 0, self.levels).astype(np.int8)

    def of(self, index: int) -> dict[str, Any]:
        """One tool's ``risk_level`` (the one level), ``risk_provenance`` and ``risk_evidence``."""
        return {"risk_level": int(self.levels[index]), "risk_provenance": self.provenance[index],
                "risk_evidence": list(self.evidence[index])}

    def with_evidence(self, extra: Sequence[Sequence[str]]) -> ToolLevels:
        """The same levels with more evidence per tool (the definition scan's findings, say):
        what moved or qualifies a level is said where the level is read."""
        return ToolLevels(self.levels.copy(), self.provenance,
                          tuple((*ev, *more) for ev, more in zip(self.evidence, extra, strict=True)), self.capabilities,
                          self.distribution)

    def capabilities_of(self, index: int) -> list[str]:
        """The capabilities found in tool ``index`` (empty without a level model)."""
        return list(self.capabilities[index]) if self.capabilities else []

    def subset(self, indices: Sequence[int]) -> ToolLevels:
        idx = [int(i) for i in indices]
        caps = tuple(self.capabilities[i] for i in idx) if self.capabilities else ()
        dist = self.distribution[idx].copy() if self.distribution is not None else None
        return ToolLevels(self.levels[idx].copy(), tuple(self.provenance[i] for i in idx), tuple(self.evidence[i] for i in idx), caps,
                          dist)

    def doubt(self, confirm_level: int) -> np.ndarray:
        """[N] the level model's probability that each tool's rubric level lies on the other side
        of ``confirm_level`` from the level served: P(level < confirm_level) for a tool a call of
        which would be asked about, P(level >= confirm_level) for one that would run without a
        question. NaN where the level is not the model's (pinned, audited, no level model).

        The model is right about most tools and unsure about some; an operator who checks the
        most doubtful first fixes the most wrong questions per tool read (``riskrank levels
        review``). A confident mistake has little doubt and is not found this way."""
        if self.distribution is None:
            return np.full(len(self), np.nan)
        c = min(max(int(confirm_level), 1), 6)
        at_or_above = self.distribution[:, c - 1:].sum(axis=1)
        return np.where(self.levels >= c, 1.0 - at_or_above, at_or_above)

    def review_order(self, confirm_level: int) -> list[int]:
        """The tools whose level is the model's, most doubtful first (:meth:`doubt`; ties in
        catalogue order): the order ``riskrank levels review`` asks an operator to check them."""
        d = self.doubt(confirm_level)
        idx = np.flatnonzero(np.isfinite(d))
        return [int(i) for i in idx[np.argsort(-d[idx], kind="stable")]]


def resolve_tool_levels(
    tools: Sequence[Any], *, head_levels: np.ndarray | None = None, head_scores: np.ndarray | None = None,
    fill_keyword: bool = False, trust_annotations: bool = False, pins: Mapping[str, int] | None = None,
    prediction: Any = None,
) -> ToolLevels:
    """Each tool's level, in order of trust, with its provenance and evidence (``tools``:
    objects with ``name``, ``description``, ``risk_level``, ``annotations``, as
    :class:`riskrank.registry.Tool`):

    1. a level the operator's policy pins (``pins``: name -> level; ``policy``);
    2. an audited level (``audited``);
    3. with a learned risk head (``head_levels`` [N] 1..5, ``head_scores`` [N] its (r - 1) / 4
       regression, shown in the evidence): the head's level combined with the keyword
       evidence (the higher of the two: ``predicted``, or ``keyword`` when the keywords rate
       it higher) and its MCP annotations (``annotation`` when a hint moved the level); with
       the level model's reading (``prediction``, :class:`riskrank.levels.LevelPrediction`)
       the level is the model's, raised to the floor of the capabilities the tool shows
       (``keyword`` when a floor raised it), then by its hints to the model's hint floors;
    4. without one, with ``fill_keyword``: the keyword annotator's level (``keyword``);
    5. else the fail-closed level: MCP hints set it (``annotation``), or L5 (``unlabelled``).

    Hints only raise by default (``destructiveHint: true`` to at least L4, ``openWorldHint:
    true`` to at least L2; with the level model, to its hint floors): a ``readOnlyHint`` cannot
    lower a tool the head or the keywords rate risky, because servers mislabel tools. With
    ``trust_annotations`` an uncontradicted ``readOnlyHint`` caps the level at L2, never below
    a capability floor."""
    pins = pins or {}
    closed = fail_closed_levels(tools, trust_annotations=trust_annotations)
    levels, provenance, evidence = [], [], []
    for i, tool in enumerate(tools):
        if tool.name in pins:
            level, source = int(pins[tool.name]), "policy"
            why = [f"policy: L{level}"] + ([f"audited: L{tool.risk_level} (overridden)"] if tool.risk_level else [])
        elif tool.risk_level:
            level, source = int(tool.risk_level), "audited"
            why = [f"audited: L{tool.risk_level}"] + ([tool.reason] if getattr(tool, "reason", None) else [])
        elif prediction is not None:
            level, source, why = _model_level(tool, prediction, i, trust_annotations)
        elif head_levels is not None:
            level, source, why = _head_level(tool, int(head_levels[i]), float(head_scores[i]) if head_scores is not None else None,
                                             trust_annotations)
        elif fill_keyword:
            level, why = keyword_level(tool.name, tool.description, dict(tool.annotations or {}), trust_annotations=trust_annotations)
            source = "keyword"
        elif closed[i] > 0:
            level, source, why = int(closed[i]), "annotation", [f"mcp annotations -> L{int(closed[i])}"]
        else:
            level, source, why = 5, "unlabelled", ["no audited level and no risk head: treated as L5 (fail closed)"]
        levels.append(level)
        provenance.append(source)
        evidence.append(tuple(why))
    caps = () if prediction is None else tuple(
        tuple(f"{h.key} ({h.capability.technique[0]})" for h in hits) for hits in prediction.evidence.hits)
    dist = None
    if prediction is not None:
        dist = np.asarray(prediction.probabilities, dtype=np.float64).copy()
        dist[[p in ("policy", "audited") for p in provenance]] = np.nan
    return ToolLevels(np.asarray(levels, dtype=np.int8), tuple(provenance), tuple(evidence), caps, dist)


def _model_level(tool: Any, prediction: Any, i: int, trust_annotations: bool) -> tuple[int, str, list[str]]:
    """The level model's level for tool ``i`` (capability floors applied), then its hints:
    each raises to the model's hint floor; a trusted, uncontradicted ``readOnlyHint`` caps at
    L2 but never below the capability floor."""
    why = prediction.explain(i)
    level = int(prediction.levels[i])
    source = "keyword" if prediction.floors[i] > prediction.model_levels[i] else "predicted"
    floors = prediction.hint_floors
    ann = tool.annotations or {}
    raises = (("destructiveHint", ann.get("destructiveHint") is True, "destructiveHint"),
              ("readOnlyHint=false", ann.get("readOnlyHint") is False, "readOnlyHint false (the server says it changes state)"),
              ("openWorldHint", ann.get("openWorldHint") is True, "openWorldHint"))
    for key, present, says in raises:
        floor = int(floors.get(key, 1))
        if present and level < floor:
            level, source = floor, "annotation"
            why.append(f"mcp: {says} raises the level to L{floor}")
        elif present:
            why.append(f"mcp: {says} (the level is already L{level})")
    if ann.get("readOnlyHint") is True and ann.get("destructiveHint") is True:
        # a server that calls one tool both read-only and destructive has said nothing a level can rest on
        why.append("mcp: readOnlyHint contradicted by the tool's own destructiveHint, ignored")
    elif ann.get("readOnlyHint") is True:
        level, source = _read_only_hint(tool, level, source, why, max(_READ_ONLY_CAP, int(prediction.floors[i])), trust_annotations)
    return level, source, why


def _read_only_hint(tool: Any, level: int, source: str, why: list[str], cap: int, trust: bool) -> tuple[int, str]:
    """A ``readOnlyHint``: trusted and not contradicted by the tool's own words, it caps the
    level at ``cap`` (the read-only cap, or a capability floor above it); ``why`` says which."""
    text = normalise_text(split_name(tool.name) + " " + tool.description)
    if not trust:
        why.append("mcp: readOnlyHint (not trusted: hints only raise a level)")
    elif read_only_contradicted(text, permission_categories(tool.name, tool.description)):
        why.append("mcp: readOnlyHint contradicted by the description, ignored")
    elif level > cap:
        why.append(f"mcp: readOnlyHint (trusted) caps the level at L{cap}" + (" (the capability floor)" if cap > _READ_ONLY_CAP else ""))
        return cap, "annotation"
    elif level > _READ_ONLY_CAP:
        why.append(f"mcp: readOnlyHint (trusted) lowers nothing: the tool's capabilities put it at L{cap} or above")
    else:
        why.append("mcp: readOnlyHint (trusted; agrees)")
    return level, source


def trusted_read_only_level(tool: Any, level: int, floor: int) -> int:
    """The level a trusted ``readOnlyHint`` leaves a tool served at ``level`` with capability
    floor ``floor`` (what ``--trust-annotations`` serves): at most L2 unless its own words
    contradict the hint, never below the floor. For measuring the option as served."""
    return _read_only_hint(tool, level, "predicted", [], max(_READ_ONLY_CAP, int(floor)), True)[0]


def _head_level(tool: Any, head: int, score: float | None, trust_annotations: bool) -> tuple[int, str, list[str]]:
    kw, hits = keyword_level(tool.name, tool.description, None)
    why = [f"risk head: L{head}" + (f" (score {score:.2f})" if score is not None else "")]
    why += [f"keyword {h}" for h in hits] or ["keyword: no risk keyword"]
    level, source = (head, "predicted") if head >= kw else (kw, "keyword")
    ann = tool.annotations or {}
    if ann.get("destructiveHint") is True:
        if level < 4:
            level, source = 4, "annotation"
            why.append("mcp: destructiveHint raises the level to L4")
        else:
            why.append("mcp: destructiveHint (agrees)")
    elif ann.get("readOnlyHint") is True:
        level, source = _read_only_hint(tool, level, source, why, _READ_ONLY_CAP, trust_annotations)
    elif ann.get("readOnlyHint") is False and level < 3:
        # the server itself says the tool changes state: a persistent write is L3 by the rubric
        level, source = 3, "annotation"
        why.append("mcp: readOnlyHint false (the server says it changes state) raises the level to L3")
    if ann.get("openWorldHint") is True and level < 2:
        level, source = 2, "annotation"
        why.append("mcp: openWorldHint raises the level to L2")
    return level, source, why


def resolve_levels(
    tools: Sequence[Any], head_levels: np.ndarray, head_scores: np.ndarray, *, trust_annotations: bool = False,
) -> tuple[np.ndarray, list[str], list[list[str]]]:
    """(levels, provenance, evidence) of :func:`resolve_tool_levels` with a risk head, as lists."""
    r = resolve_tool_levels(tools, head_levels=head_levels, head_scores=head_scores, trust_annotations=trust_annotations)
    return r.levels, list(r.provenance), [list(e) for e in r.evidence]
