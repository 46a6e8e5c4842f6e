"""What makes a capability dangerous in itself, read from a tool's name, description and schema.

A tool's level should not depend on whether its author remembered to say "destructive". Some
capabilities are dangerous whatever the tool calls itself: it reads secrets, captures what a
person types or sees, sends data where the caller says, runs commands, changes who may do
what, destroys data, moves money, persists or hides itself. Each :class:`Capability` names one,
maps it to the rubric's floor (the lowest level a tool with it can be served at) and cites the
MITRE ATT&CK technique an attacker uses it for, the vocabulary of attacker capabilities
(ATT&CK® is a registered trademark of The MITRE Corporation; technique identifiers and names
are cited from ATT&CK Enterprise v18.1, © The MITRE Corporation, under its terms of use).

Where it looks: the tool's name (split into words), the first two sentences of its
description (what a tool *does* is said there; later sentences hold caveats, pointers to other
tools and examples) and its parameter names. The critical capabilities (harvesting
credentials, surveillance, covert exfiltration, intrusion, disabling defences, persistence) are
also looked for in the whole description, since nobody writes them by accident. A match preceded
by a negation ("does not delete") does not count, and a match stays inside one clause (a verb of
one sentence and an object of the next, or of a parameter's name, are not one act). A name that
says the tool reads (``get_``, ``list_``) takes no action its description names for a report,
but does take the one the description opens with ("Deletes files older than a day"). Texts are
bounded (:data:`MAX_CHARS`), so a 100 kB description costs what a short one does.

The patterns were written from the rubric's anchors (docs/audit.md), ATT&CK's technique names
and the verbs and objects of tool APIs in general, and are judged on MCP servers whose tools
were not read while they were written (docs/base-model.md, "The level model"). They are
evidence with a floor, not the level: the level model (:mod:`riskrank.levels`) reads them as
features and applies the floors after it.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from riskrank.risk import normalise_text, split_name

#: Characters of a description read at most (the first two sentences are read from the start).
MAX_CHARS = 20_000
#: Words before a match that may negate it.
_NEGATION_WINDOW = 4
_NEGATIONS = frozenset({"not", "never", "no", "cannot", "without", "nor", "t", "neither", "non"})
# A few words between a verb and its object ("delete the given resource group").
_G = r"(?:\w+ ){0,3}"
_G6 = r"(?:\w+ ){0,6}"


@dataclass(frozen=True)
class Capability:
    """One dangerous capability: its key, what it is in words, the rubric floor a tool with it
    is served at, and the ATT&CK technique (id, name) an attacker uses it for."""

    key: str
    says: str
    floor: int
    technique: tuple[str, str]
    tactic: str
    #: patterns over the scoped text (name, first sentences, parameter names)
    scoped: tuple[str, ...]
    #: patterns over the whole (bounded) description too
    anywhere: tuple[str, ...] = ()
    #: an action (deleting, sending, granting, paying, running): a tool whose name says it
    #: reads (``get_``, ``list_``) shows it only in its name, since such a tool's description
    #: names the actions it reports on ("the resources a plan would delete")
    acts: bool = True
    #: patterns over the raw, lower-cased description (paths and command lines, whose
    #: punctuation the normalised text drops): ``~/.aws/credentials``, ``cmd.exe /c``
    raw: tuple[str, ...] = ()

    def evidence(self, quote: str) -> str:
        tid, tname = self.technique
        return f"{self.says} ({self.tactic}, like {tid} {tname}): {quote!r} -> at least L{self.floor}"


_READ = r"(?:get|gets|getting|read|reads|reading|retriev\w*|fetch\w*|show\w*|reveal\w*|print\w*|return\w*|display\w*|dump\w*|export\w*|view\w*|decrypt\w*|expos\w*|output\w*|obtain\w*|access\w*|list|lists|listing)"
_CREATE = r"(?:creat(?:e|es|ing)|generat(?:e|es|ing)|rotat(?:e|es|ing)|issu(?:e|es|ing)|regenerat(?:e|es|ing)|reset|resets|resetting|mint|mints|minting|set|sets|setting|updat(?:e|es|ing)|add|adds|adding|stor(?:e|es|ing)|import|imports|importing)"
_SECRET = (r"(?:secret values?|secrets?|passwords?|passphrases?|credentials?|api keys?|access keys?|secret keys?|private keys?|"
           r"signing keys?|ssh keys?|(?:access|auth|bearer|api|refresh|session|personal access|oauth|id|jwt|service account) tokens?|"
           r"connection strings?|client secrets?|keys? vault secrets?|certificates? private keys?|kubeconfig|environment variables?|env vars?)")
_HARVEST_VERB = r"(?:steal\w*|harvest\w*|exfiltrat\w*|extract\w*|dump\w*|collect\w*|scrap(?:e|es|ing)|grab\w*|locat(?:e|es|ing)|sniff\w*|crack\w*|captur\w*|siphon\w*|hunt\w*)"
_HARVEST_OBJ = (r"(?:credentials?|passwords?|password hashes|hashes|ssh (?:private )?keys?|private keys?|cookies|session cookies|keychains?|"
                r"(?:browser|saved|stored|cached) (?:passwords?|credentials?|logins?)|(?:aws|cloud|gcp|azure|kube\w*) (?:credentials?|keys?|config\w*)|"
                r"tokens?|api keys?|wallets?|seed phrases?|lsass)")
_CHANGE = r"(?:grant|grants|granting|revok(?:e|es|ing)|assign|assigns|assigning|unassign|unassigns|add|adds|adding|remov(?:e|es|ing)|chang(?:e|es|ing)|modif(?:y|ies|ying)|updat(?:e|es|ing)|set|sets|setting|creat(?:e|es|ing)|delet(?:e|es|ing)|elevat(?:e|es|ing)|escalat(?:e|es|ing)|promot(?:e|es|ing)|edit|edits|editing|attach|attaches|attaching|detach|detaches|detaching|allow|allows|allowing|open|opens|opening)"
_ACCESS_OBJ = (r"(?:roles?|role assignments?|role bindings?|cluster ?role\w*|permissions?|iam\b|iam polic\w+|access polic\w+|security polic\w+|bucket polic\w+|"
               r"network polic\w+|acls?|access control lists?|privileges?|firewall(?: rules?)?|security groups?|network rules?|ingress rules?|ip allow ?lists?|"
               r"allow ?lists?|whitelists?|mfa|2fa|multi factor\w*|authentication (?:settings?|methods?|polic\w+)|sudoers|admin(?:istrator)? (?:rights|access|role)|"
               r"owners?(?:hip)?|collaborators?|group membership|sharing settings?|public access)")
_DELETE = r"(?:delet(?:e|es|ing)|clean(?:s|ing)? ?up|drop(?:s|ping)?|destroy(?:s|ing)?|purg(?:e|es|ing)|eras(?:e|es|ing)|truncat(?:e|es|ing)|wip(?:e|es|ing)|terminat(?:e|es|ing)|overwrit(?:e|es|ing)|shred\w*|obliterat\w*|uninstall\w*|force push\w*|nuk(?:e|es|ing))"
_REMOVE_OBJ = (r"(?:files?|director(?:y|ies)|folders?|databases?|tables?|collections?|index(?:es)?|indices|clusters?|buckets?|repositor(?:y|ies)|branch(?:es)?|projects?|"
               r"accounts?|users?|vms?|virtual machines?|instances?|resources?|records?|documents?|nodes?|namespaces?|deployments?|pods?|volumes?|"
               r"snapshots?|backups?|keys?|secrets?|rows?|data|objects?|blobs?|containers?|zones?|domains?|services?|workspaces?)")
_WHOLESALE = (r"(?:database|databases|cluster|clusters|account|accounts|project|projects|organi[sz]ations?|orgs?|tenants?|resource groups?|"
              r"every\w*|all|entire|whole)")
_MONEY = (r"(?:money|funds?|payments?|payouts?|refunds?|balances?|crypto\w*|bitcoin|btc|eth|usdc?|dollars|euros|amounts?|wire transfers?|"
          r"bank transfers?|credit|card|cards|charges?|invoices? payments?)")

#: Words after "purchase" that make it a noun: the records and plans of buying, not buying.
_PURCHASE_NOUN = r"(?:history|histories|schedules?|records?|orders?|lists?|process(?:es)?|prices?|amounts?|dates?|details|status|requests?|plans?)"


CAPABILITIES: tuple[Capability, ...] = (
    Capability(
        "host_execution", "runs arbitrary commands on the host", 5, ("T1059", "Command and Scripting Interpreter"), "execution",
        scoped=(
            r"(?:execut\w*|run|runs|running|spawn\w*|launch\w*|start|starts|starting|invok\w*) " + _G
            + r"(?:shell|terminal|system|bash|zsh|powershell|cmd|os|arbitrary|any|host) (?:commands?|process\w*|scripts?)\b",
            r"(?:execut\w*|run|runs|running) " + _G + r"commands? (?:on|in) (?:the |a |your )?(?:host|machine|computer|system|server|terminal|shell)\b",
            r"(?:start|starts|spawn\w*|launch\w*) (?:a |new |any )*(?:terminal |shell |os |system )?process(?:es)? "
            + _G6 + r"(?:commands?|program|executable|binary)\b",
            r"(?:reverse|interactive|remote|root) shells?\b", r"arbitrary (?:shell |system |os )?commands?\b",
        ),
        anywhere=(r"reverse shells?\b", r"bind shells?\b", r"remote code execution\b", r"arbitrary (?:shell |system |os )?commands? (?:execution|on)\b",
                  r"(?:meterpreter|cobalt strike|netcat|ncat|socat|psexec|wmiexec)\b",
                  r"(?:start\w*|run\w*|launch\w*|execut\w*|spawn\w*) any (?:program|process|binary|executable|command)s?\b"),
        raw=(r"\b(?:rundll32|regsvr32|mshta|certutil|bitsadmin|installutil|msbuild|wmic)(?:\.exe)?\b", r"child_process\b", r"\bcmd(?:\.exe)?\s+/[ck]\b", r"\b(?:ba|z|da)?sh\s+-c\b", r"\bpowershell(?:\.exe)?\s+-(?:e|enc|encodedcommand|c|command|nop|w)\b",
             r"\bos\.system\(|\bsubprocess\.(?:run|popen|call|check_output)\b", r"\bnc\s+-[a-z]*e\b", r"/bin/(?:ba)?sh\b"),
    ),
    Capability(
        "code_execution", "runs code or commands", 4, ("T1059", "Command and Scripting Interpreter"), "execution",
        scoped=(
            r"(?:execut\w*|run|runs|running|invok\w*|spawn\w*|launch\w*|evaluat\w*) " + _G
            + r"(?:shell |terminal |system |bash |os |arbitrary |python |javascript |js |cli |custom |user )?"
            + r"(?:commands?|code|scripts?|programs?|snippets?|binar\w+|expressions? in the page|functions? in the page)\b",
            r"(?:bash|zsh|powershell|sudo|subprocess\w*)\b", r"(?:shell|terminal|kubectl|cli) commands?\b", r"eval\b", r"exec\b",
            r"code execution\b", r"run_code\b",
            r"(?:execut\w*|run|runs|accept\w*|tak(?:e|es|ing)) (?:an |a |the )?(?:arbitrary|any|raw|custom) (?:sql|queries|query|statements?)\b",
            r"(?:ddl|dml) (?:statements?|commands?|queries)\b", r"params (?:command|cmd|script|code|shell|bash|javascript|python)\b",
        ),
    ),
    Capability(
        "credential_harvesting", "harvests credentials from the system", 5, ("T1555", "Credentials from Password Stores"), "credential access",
        scoped=(_HARVEST_VERB + " " + _G + _HARVEST_OBJ + r"\b",),
        anywhere=(
            _HARVEST_VERB + " " + _G + _HARVEST_OBJ + r" " + _G + r"(?:from|in|on|stored|saved|cached) " + _G
            + r"(?:files?|config\w*|disk|memory|browsers?|keychains?|stores?|hosts?|machines?|system|home director\w+|dot ?files)\b",
            r"password hash(?:es)?\b", r"lsass\b", r"mimikatz\b", r"credential dump\w*", r"keychain dump\w*", r"ntds dit\b",
            r"(?:sam|security|system) hives?\b", r"kerberoast\w*", r"(?:golden|silver) tickets?\b", r"dcsync\b", r"pass the (?:hash|ticket)\b",
            r"(?:browser|chrome|firefox|edge|safari) (?:saved |stored )?(?:passwords?|cookies|credentials?|logins?|login data)\b",
            r"(?:steal\w*|harvest\w*|grab\w*|hijack\w*) " + _G + r"(?:sessions?|session tokens?|cookies|oauth tokens?|refresh tokens?|tickets)\b",
            r"(?:seed phrases?|wallet (?:files?|keys?)|private keys? of (?:the |a )?wallet)\b",
            r"(?:collect\w*|read\w*|dump\w*|gather\w*|grab\w*) " + _G6 + r"(?:environment variables|env vars|secret files|secrets|credentials|tokens) (?:of|from|in) (?:every|all|each|other)\b",
            r"(?:log\w*|record\w*|captur\w*|sav\w*|stor\w*|keep\w*) " + _G + r"(?:every |all |the )?passwords? (?:that )?(?:users? |people |they )?(?:type|types|typed|enter|enters|entered)\b",
            r"raw secret values?\b",
            r"(?:ssh|aws|gcloud|kube) (?:private )?(?:keys?|credentials?|config\w*) " + _G + r"(?:to|and send|and upload|and exfiltrat\w*)\b",
        ),
        acts=False,
        raw=(r"\.(?:pst|ost)\b", r"~?/?\.aws/credentials\b", r"\.ssh/id_(?:rsa|dsa|ecdsa|ed25519)\b(?!\.pub)", r"\bid_(?:rsa|dsa|ecdsa|ed25519)\b(?!\.pub)",
             r"/etc/shadow\b", r"\.git-credentials\b", r"\.netrc\b", r"\.docker/config\.json\b", r"\.kube/config\b",
             r"\bntds\.dit\b", r"\blsass(?:\.exe)?\b", r"\bkey[34]\.db\b", r"\blogins\.json\b", r"\bcookies\.sqlite\b",
             r"\bwallet\.dat\b", r"\blogin data\b", r"\.config/gcloud\b", r"\.bash_history\b"),
    ),
    Capability(
        "credential_access", "reads or creates secrets or credentials", 4, ("T1552", "Unsecured Credentials"), "credential access",
        scoped=(
            _READ + " " + _G + r"(?:the )?(?:value|values|contents?) of (?:a |the )?" + _G + _SECRET + r"\b",
            _READ + " " + _G6 + _SECRET + r"(?: values?)?\b",
            _CREATE + " " + _G + _SECRET + r"\b",
            r"(?:get|print|show|dump|read) env\b",
        ),
        acts=False,
    ),
    Capability(
        "surveillance", "captures keystrokes, the screen, the camera, the microphone or a location", 5, ("T1056", "Input Capture"), "collection",
        scoped=(
            r"(?:captur\w*|record\w*|grab\w*|stream\w*|take|takes|taking|snap\w*) " + _G
            + r"(?:screenshots? of (?:the |your |a )?(?:entire |whole |user s |users )?(?:screen|desktop|display|monitor)s?|"
            + r"(?:the |your |user s |users )?(?:entire |whole )?(?:screen|desktop|display)s?(?! of the page)\b)",
            r"(?:turn\w* on|activat\w*|access\w*|record\w*|captur\w*|stream\w*|snap\w*) " + _G + r"(?:webcam|camera|microphone|mic)\b",
            r"(?:record\w*|captur\w*|start\w*) (?:the )?(?:screen|desktop) (?:recording|video|capture)\b",
        ),
        anywhere=(
            r"keylogging\b", r"(?:install\w*|deploy\w*|run|runs|start\w*|acts? as|functions? as|works? as|embed\w*) (?:a |an )?keylog\w*",
            r"(?:captur\w*|record\w*|log|logs|logging|monitor\w*|intercept\w*|collect\w*|steal\w*|sniff\w*) " + _G
            + r"(?:keyboard input|key ?strokes?|keystroke\w*|typing|typed (?:text|passwords?|input))\b",
            r"(?:turn on|activat\w*|access\w*|record\w*|captur\w*|stream\w*) " + _G + r"(?:webcam|camera|microphone)s?\b",
            r"(?:track\w*|trac(?:e|es|ing)|locat\w*|follow\w*) " + _G + r"(?:a person|people|someone|user s|users|the user|individuals?|phones?|devices?) s? (?:gps |physical |real time )?locations?\b",
            r"clipboard (?:contents?|data|history)\b", r"(?:read\w*|captur\w*|monitor\w*|log\w*|collect\w*) " + _G + r"clipboard\b",
            r"screenshots? " + _G + r"(?:every|periodically|at intervals|in the background|silently)\b",
            r"(?:periodic|background|silent|hidden|covert) (?:screen ?shots?|screen captures?|recordings?)\b",
            r"(?:browsing|browser|search) history\b", r"(?:microphone|mic|camera|webcam) (?:open|on|active|enabled|running)\b", r"(?:record\w*|captur\w*|eavesdrop\w*|listen\w*) " + _G + r"(?:calls?|conversations?|audio|microphone)\b",
        ),
        acts=False,
    ),
    Capability(
        "exfiltration", "moves data out covertly or wholesale", 5, ("T1048", "Exfiltration Over Alternative Protocol"), "exfiltration",
        scoped=(r"exfiltrat\w*",),
        anywhere=(
            r"exfiltrat\w*", r"dns (?:tunnel\w*|queries (?:to|that) (?:send|carry|encode|leak)\w*)", r"covert (?:channels?|transfer\w*)",
            r"command and control\b", r"c2 (?:servers?|channels?)\b", r"beacon\w* to\b",
            r"(?:send|upload|copy|transfer|forward|post)\w* " + _G6 + r"(?:all|every|entire|whole|bulk) " + _G
            + r"(?:files?|data|records?|contents?|customers?|users?|contacts?|emails?) " + _G + r"to (?:an? )?(?:external|remote|outside|third party|attacker)\b",
            r"exfil\b", r"(?:encod\w*|embed\w*|split\w*|chunk\w*|smuggl\w*) " + _G6 + r"(?:subdomains?|dns (?:queries|lookups?|labels?|requests?|records?)|icmp|pings?)\b",
            r"(?:forward\w*|redirect\w*|auto forward\w*) " + _G + r"(?:all|every|incoming|new) (?:e ?mails?|mail|messages?)\b",
            r"(?:mail ?box|inbox) (?:export|dump)\b|(?:export\w*|dump\w*|download\w*) " + _G + r"(?:entire|whole|full|all) (?:mail ?box|inbox)\w*",
            r"(?:pastebin|transfer sh|webhook site|requestbin|ngrok|file io|mega nz)\b", r"steganograph\w*",
            r"(?:raw|plain) (?:tcp|tls|udp) sockets?\b", r"(?:account|server|bucket|endpoint|address) (?:owned|controlled|run) by (?:the )?(?:tool s |tools )?(?:author|attacker|operator|vendor)\b",
            r"destination (?:is )?not (?:shown|disclosed|visible)\b",
            r"(?:to|into|with) (?:an? )?(?:outside|external|foreign|other|third party) (?:aws |cloud |storage )?accounts?(?: id)?\b",
            r"(?:clon\w*|cop(?:y|ies|ying)|collect\w*|download\w*|harvest\w*|grab\w*|archiv\w*|zip\w*) " + _G
            + r"(?:every|all) (?:private |internal |reachable )?(?:repos|repositories|mail ?boxes|shares|smb shares|network shares|documents)\b",
            r"from (?:all|every) (?:reachable |accessible |mapped )?(?:smb |network )?(?:shares|drives|hosts)\b",
            r"(?:upload|send|post|ship|sync)\w* (?:them|it|everything|the (?:files?|data|archive|results?|bundle)) " + _G
            + r"to (?:a |an |the )?(?:remote|external|attacker\w*|configured|hard ?coded|author s|our) (?:server|endpoint|host|url|bucket|address|domain)\b",
        ),
        acts=False,
    ),
    Capability(
        "outbound_send", "sends data to a destination the caller chooses", 3, ("T1567", "Exfiltration Over Web Service"), "exfiltration",
        scoped=(
            r"(?:send|sends|sending|post|posts|posting|publish\w*|forward\w*|upload\w*|e ?mail|e ?mailing|tweet\w*|broadcast\w*|"
            r"reply|replies|replying|dm|notif(?:y|ies|ying)) " + _G
            + r"(?:messages?|e ?mails?|mails?|sms|texts?|notifications?|files?|data|payloads?|webhooks?|comments?|replies|"
            + r"tweets?|invit\w+|posts?|reports?|alerts?|attachments?|documents?)\b",
            r"(?:send|post|upload)_\w+", r"(?:http|https|web|api) (?:post|put|patch|delete) requests?\b",
            r"(?:make|makes|making|send|sends|issue|issues) " + _G + r"(?:http|https|web|api|rest) requests? to (?:any|an arbitrary|arbitrary|a given|the given|a specified|any given)\b",
            r"(?:call|calls|trigger\w*|invok\w*) " + _G + r"webhooks?\b",
        ),
    ),
    Capability(
        "defense_evasion", "disables defences or hides activity", 5, ("T1562", "Impair Defenses"), "defense evasion",
        scoped=(
            r"(?:disabl\w*|turn\w* off|stop\w*|bypass\w*|evad\w*|kill\w*|tamper\w*|suppress\w*) " + _G
            + r"(?:antivirus|anti virus|defender|edr|endpoint protection|logging|audit\w*|security (?:agents?|controls?|features?|monitoring|center|software|scanning)|"
            + r"mfa|2fa|multi factor\w*|firewall|monitoring agents?|siem)\b",
            r"(?:clear\w*|delet(?:e|es|ing)|wip(?:e|es|ing)|eras(?:e|es|ing)|truncat(?:e|es|ing)|tamper\w*|scrub\w*|purg(?:e|es|ing)) " + _G
            + r"(?:event logs?|audit (?:logs?|trails?|events?)|security logs?|system logs?|bash history|shell history|command history|traces of|evidence|forensic)\w*",
        ),
        anywhere=(
            r"(?:hid(?:e|es|ing)|conceal\w*|mask\w*) " + _G + r"(?:its |the |this |their )?(?:activity|activities|processes|presence|tracks|artifacts|footprints?)\b",
            r"without (?:the )?(?:user|owner|victim|administrator|admin) s? (?:knowledge|noticing|consent|awareness)\b",
            r"(?:evad\w*|avoid\w*|bypass\w*) (?:detection|antivirus|edr|security monitoring)\b", r"anti forensic\w*",
            r"(?:disabl\w*|turn\w* off|stop\w*|kill\w*|tamper\w*|unload\w*|blind\w*) " + _G
            + r"(?:windows defender|defender|antivirus|edr|amsi|etw|sysmon|auditd|selinux|apparmor|tamper protection|real time protection|"
            + r"security (?:agents?|services?|software|tools?|monitoring)|event logging|audit logging)\b",
            r"(?:clear\w*|wip(?:e|es|ing)|eras(?:e|es|ing)|delet(?:e|es|ing)|truncat\w*|tamper\w*) " + _G
            + r"(?:event logs?|security logs?|audit (?:logs?|trails?)|system logs?|bash history|shell history|command history|syslog)\b",
            r"timestomp\w*", r"(?:process|dll|code|shellcode) (?:injection|hollowing)\b", r"inject\w* " + _G + r"(?:shellcode|dll|into (?:a |another |the )?(?:process|memory))\b",
            r"(?:uac|amsi) bypass\w*|bypass\w* (?:uac|amsi)\b", r"masquerad\w*", r"unhook\w*",
            r"(?:evad\w*|avoid\w*|bypass\w*|defeat\w*) " + _G + r"(?:av|antivirus|anti virus|edr|signatures?|detection|scanners?)\b",
            r"(?:scan |antivirus |av |defender )exclusions?\b|exclusion lists?\b", r"(?:never|not be|no longer) (?:inspected|scanned|monitored|logged)\b",
            r"(?:pack\w*|obfuscat\w*|crypt\w*) " + _G + r"(?:binar\w+|payloads?|executables?|malware|shellcode)\b",
            r"(?:hid(?:e|es|ing)|conceal\w*) " + _G + r"(?:window|process|files?|folders?|directory|itself|the tool|network connections?)\b",
        ),
        raw=(r"\bwevtutil(?:\.exe)?\s+cl\b", r"\bvssadmin(?:\.exe)?\s+delete\b", r"\bset-mppreference\b", r"\bhistory\s+-c\b"),
    ),
    Capability(
        "persistence", "persists on a system or adds a way back in", 5, ("T1547", "Boot or Logon Autostart Execution"), "persistence",
        scoped=(
            r"(?:add\w*|creat\w*|install\w*|register\w*|plant\w*|insert\w*) " + _G
            + r"(?:startup items?|autostart\w*|login items?|launch agents?|launch daemons?|launchd|run keys?|registry run|crontab entr\w+|cron jobs? on the host|"
            + r"scheduled tasks? on the host|backdoors?|rootkits?|implants?|ssh authorized keys?|authorized keys)\b",
            r"(?:creat\w*|add\w*) " + _G + r"(?:hidden|backdoor|rogue) (?:admin\w* |root |privileged )?(?:users?|accounts?)\b",
        ),
        anywhere=(r"backdoors?\b", r"rootkits?\b", r"(?:ssh )?authorized keys\b", r"persistence mechanisms?\b",
                  r"(?:startup folder|run keys?|registry run|launch agents?|launch daemons?|login items?|schtasks|rc local|webshells?|web shells?|"
                  r"wmi (?:event )?subscriptions?|login hooks?)\b",
                  r"(?:add\w*|append\w*|modif\w*|writ\w*|insert\w*) " + _G + r"(?:bashrc|bash profile|zshrc|profile|crontab|systemd (?:units?|services?|timers?))\b",
                  r"(?:survive|persist\w*|remain\w*) " + _G + r"(?:reboots?|restarts?|logouts?|logoffs?)\b",
                  r"(?:at|on) (?:every |each )?(?:logon|login|startup|boot)\b", r"ld so preload\b|ld preload\b|dyld insert\w*|dll (?:hijack\w*|side ?load\w*)",
                  r"(?:auto ?run|autorun|auto ?open) macros?\b", r"startup (?:binar\w+|scripts?|programs?) from\b",
                  r"(?:creat\w*|add\w*) " + _G + r"(?:local |new |hidden |secondary )?(?:admin\w*|root|superuser|domain admin) (?:users?|accounts?)\b"),
        raw=(r"\.bashrc\b", r"\.bash_profile\b", r"\.zshrc\b", r"/etc/rc\.local\b", r"/etc/cron\.", r"\bcurrentversion\\run\b",
             r"/library/launchagents\b", r"\bschtasks(?:\.exe)?\s+/create\b"),
    ),
    Capability(
        "intrusion", "breaks into systems or escalates privileges", 5, ("T1068", "Exploitation for Privilege Escalation"), "privilege escalation",
        scoped=(
            r"(?:privilege escalat\w*|escalat\w* " + _G + r"privileges?|gain\w* (?:root|admin\w*|system) (?:access|privileges?)|root access)\b",
            r"(?:brute ?forc\w*|password spray\w*|crack\w* " + _G + r"(?:passwords?|hashes))\b",
            r"(?:bypass\w*|circumvent\w*) " + _G + r"(?:authentication|login|access controls?|authori[sz]ation)\b",
            r"(?:exploit\w*) " + _G + r"(?:vulnerabilit\w+|cves?|systems?|hosts?|targets?|servers?)\b",
        ),
        anywhere=(r"privilege escalat\w*", r"remote access trojans?\b", r"\brats? implant\w*", r"(?:c2|command and control) (?:servers?|channels?|implants?|agents?)\b",
                  r"(?:malware|c2|attacker s|remote) implants?\b", r"beacon\w* (?:to|home|back|out)\b", r"lateral(?:ly)? mov\w*", r"(?:spread\w*|propagat\w*|pivot\w*) " + _G + r"(?:to|across|through) " + _G
                  + r"(?:hosts?|machines?|systems?|networks?)\b", r"(?:port|network|vulnerability) scan\w* " + _G + r"(?:targets?|hosts?|subnets?|ranges?)\b",
                  r"(?:brute ?forc\w*|password spray\w*|credential stuff\w*)\b", r"(?:hashcat|john the ripper|hydra)\b",
                  r"escape\w* " + _G + r"(?:the )?(?:container|sandbox|vm|virtual machine)\b", r"container escape\w*",
                  r"(?:sudo|setuid|suid) " + _G + r"(?:abuse|exploit\w*|misconfigur\w*)\b",
                  r"socks ?5? proxy\b", r"(?:proxy|exit) nodes?\b", r"(?:relay\w*|rout\w*|tunnel\w*|forward\w*) " + _G
                  + r"(?:the )?(?:operator s|attacker s|third part(?:y|ies) s?|remote|external) traffic\b", r"into (?:the )?internal network\b",
                  r"forg(?:e|es|ed|ing) " + _G + r"(?:session |auth |signed |kerberos )?(?:cookies?|tokens?|tickets?|certificates?|jwts?|signatures?)\b",
                  r"privileged (?:containers?|pods?)\b", r"(?:host s|node s|host|node) root (?:filesystem|file system)\b", r"full control of the (?:node|host|machine|cluster)\b",
                  r"(?:session hijack\w*|hijack\w* " + _G + r"sessions?)\b", r"pam modules?\b", r"(?:universal|master|skeleton) (?:pass(?:word|phrase)|key)\b",
                  r"(?:under|with) the same tag\b", r"tscon\b"),
    ),
    Capability(
        "fraud", "deceives people or steals value", 5, ("T1656", "Impersonation"), "impact",
        scoped=(
            r"(?:impersonat(?:e|es|ing)|spoof(?:s|ing)?) " + _G + r"(?:users?|emails?|senders?|messages?|domains?|callers?|executives?|people|victims?|targets?|pages?|identit\w+)\b",
            r"(?:drain\w*|steal\w*|siphon\w*|skim\w*) " + _G + r"(?:funds?|money|wallets?|accounts?|balances?|crypto\w*|payments?|cards?)\b",
        ),
        anywhere=(
            r"(?:send\w*|craft\w*|launch\w*|run\w*|generat\w*|creat\w*|host\w*) " + _G + r"(?:phishing|spear ?phishing|smishing|vishing)\b",
            r"(?:mfa|2fa|push) (?:fatigue|bombing|spam\w*)\b",
            r"(?:repeated\w*|keep\w*|until) " + _G6 + r"(?:mfa|push|approval) (?:requests?|prompts?|notifications?)\b",
            r"(?:drain\w*|steal\w*|siphon\w*|skim\w*) " + _G + r"(?:funds?|money|wallets?|accounts?|balances?|crypto\w*|payments?|cards?)\b",
            r"(?:pays?|payouts?|send\w*|transfer\w*) " + _G + r"to (?:the )?(?:author s|attacker s|operator s|our|a hard ?coded|a fixed) (?:wallet|account|address)\b",
            r"(?:run\w*|start\w*|install\w*|deploy\w*|launch\w*|spawn\w*) " + _G + r"(?:crypto ?min\w*|coin ?min\w*|miners?|xmrig)\b",
            r"(?:mining pools?|pays? out to)\b",
        ),
        acts=False,
    ),
    Capability(
        "mass_destruction", "destroys data or systems wholesale", 4, ("T1485", "Data Destruction"), "impact",
        scoped=(
            r"(?:" + _DELETE + r"|remov(?:e|es|ing)) " + _G + _WHOLESALE + r"\b",
            r"(?:drop|drops|dropping) (?:the )?(?:database|schema|keyspace)s?\b",
            r"(?:format\w*|wip(?:e|es|ing)) " + _G + r"(?:disks?|drives?|partitions?|volumes?|devices?)\b", r"rm rf\b", r"factory reset\w*",
            r"encrypt\w* " + _G + r"(?:all|every|the entire|the whole) (?:files?|disks?|data)\b",
            r"(?:delet(?:e|es|ing)|destroy\w*|purg(?:e|es|ing)) " + _G + r"(?:backups?|recovery points?|shadow cop\w+)\b",
        ),
        anywhere=(r"defac\w*", r"replac\w* (?:the )?site index\b", r"(?:stop\w*|kill\w*|disabl\w*) " + _G + r"services? (?:matching|named|like)\b",
                  r"ransom\w*", r"encrypt\w* " + _G + r"(?:victim s|user s|users|all the|every) (?:files?|data|disks?)\b"),
    ),
    Capability(
        "destruction", "deletes or overwrites data or resources", 3, ("T1485", "Data Destruction"), "impact",
        scoped=(
            _DELETE + r"\b",
            r"(?:remov(?:e|es|ing)) " + _G + _REMOVE_OBJ + r"\b",
        ),
    ),
    Capability(
        "software_install", "installs or deploys software", 4, ("T1072", "Software Deployment Tools"), "execution",
        scoped=(
            r"(?:install|installs|installing|upgrad(?:e|es|ing)|deploy|deploys|deploying|roll(?:s|ing)? out) " + _G
            + r"(?:plugins?|charts?|helm|packages?|software|extensions?|releases?|applications?|apps?|images?|binar\w+|drivers?|agents?|"
            + r"updates?|to production|code|functions?|workers?|services?|models?)\b",
        ),
    ),
    Capability(
        "permission_change", "changes permissions or security controls", 4, ("T1098", "Account Manipulation"), "privilege escalation",
        scoped=(_CHANGE + " " + _G + _ACCESS_OBJ + r"\b", r"(?:chmod|chown|setfacl)\b"),
    ),
    Capability(
        "financial", "moves money", 4, ("T1657", "Financial Theft"), "impact",
        scoped=(
            r"(?:transfer\w*|send|sends|sending|wire|wires|wiring|withdraw\w*|pay|pays|paying|payout\w*|charg(?:e|es|ing)|captur(?:e|es|ing)|"
            r"disburs\w*|remit\w*|move|moves|moving) " + _G + _MONEY + r"\b",
            r"(?:refund|refunds|payout|payouts) (?:a |the )?(?:payment|charge|order|amount|money|funds?|customer)s?\b", r"(?:purchas(?:e|es|ing)|buy|buys|buying|sell|sells|selling|trad(?:e|es|ing)) " + _G
            + r"(?:stocks?|shares|crypto\w*|bitcoin|securities|assets?|orders?|products?|items?|tickets?|goods)\b",
            r"(?:cancel\w*) " + _G + r"(?:paid )?subscriptions?\b",
            # placing an order buys; and a name that opens with the verb buys whatever it names
            # (``purchase_insurance``: the scoped text starts with the name's words), unless the
            # word after it makes "purchase" a noun (``purchase_history``)
            r"(?:place|places|placing) (?:an |a |the |new )?(?:\w+ )?orders?\b",
            r"^(?:purchas(?:e|es|ing)|buy|buys|buying) (?!" + _PURCHASE_NOUN + r"\b)\w+",
        ),
    ),
)

CAPABILITY_KEYS: tuple[str, ...] = tuple(c.key for c in CAPABILITIES)
_BY_KEY = {c.key: c for c in CAPABILITIES}
_SCOPED = {c.key: re.compile(r"\b(?:" + "|".join(c.scoped) + ")") for c in CAPABILITIES}
_ANYWHERE = {c.key: re.compile(r"\b(?:" + "|".join(c.anywhere) + ")") for c in CAPABILITIES if c.anywhere}
_RAW = {c.key: re.compile("|".join(c.raw)) for c in CAPABILITIES if c.raw}
#: A capability that implies another: the narrower, more severe one replaces it in the evidence.
_SUBSUMES = {"host_execution": "code_execution", "mass_destruction": "destruction", "credential_harvesting": "credential_access",
             "exfiltration": "outbound_send"}
#: First words of a name that say the tool reads (see :attr:`Capability.acts`).
READ_VERBS = frozenset({"get", "list", "describe", "fetch", "search", "show", "read", "view", "find", "count", "check", "explain",
                        "inspect", "lookup", "retrieve", "watch", "browse", "preview", "validate", "estimate", "analyze", "analyse"})
#: Words of a name that say the tool acts; a name with one of them does not only read.
ACT_VERBS = frozenset({
    "create", "update", "delete", "remove", "drop", "send", "post", "put", "patch", "set", "add", "run", "exec", "execute", "start",
    "stop", "restart", "kill", "apply", "deploy", "install", "uninstall", "grant", "revoke", "assign", "transfer", "pay", "refund",
    "capture", "cancel", "write", "edit", "modify", "move", "rename", "upload", "invoke", "trigger", "enable", "disable", "manage",
    "reset", "rotate", "purge", "terminate", "destroy", "scale", "import", "publish", "notify", "approve", "merge", "close",
    "resolve", "acknowledge", "insert", "replace", "upsert", "clear", "wipe", "truncate", "charge", "submit", "generate", "and"})
_IDENTIFIER = re.compile(r"`?\b([A-Za-z][A-Za-z0-9]*)[_-][\w-]+\b`?")


def _strip_tool_names(text: str) -> str:
    """Remove identifiers that name another tool (``get_connection_string``: a verb, then ``_``),
    so that what a description tells the agent to use is not read as this tool's action; file
    names and other identifiers (``authorized_keys``) stay."""
    return _IDENTIFIER.sub(lambda m: " " if m.group(1).lower() in READ_VERBS | ACT_VERBS else m.group(0), text)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n\s*\n|\n(?=\s*[-*#])")


@dataclass(frozen=True)
class CapabilityHit:
    """One capability found in a tool, with the words that show it."""

    key: str
    quote: str

    @property
    def capability(self) -> Capability:
        return _BY_KEY[self.key]

    @property
    def floor(self) -> int:
        return self.capability.floor

    def evidence(self) -> str:
        return self.capability.evidence(self.quote)

    def to_dict(self) -> dict[str, Any]:
        c = self.capability
        return {"capability": c.key, "says": c.says, "floor": c.floor, "technique": c.technique[0], "technique_name": c.technique[1],
                "quote": self.quote}


def parameter_names(schema: Mapping[str, Any] | None) -> list[str]:
    """The top-level parameter names of a JSON schema (or a plain name -> spec mapping)."""
    if not isinstance(schema, Mapping):
        return []
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else None
    if props is None and "type" not in schema:
        props = schema
    return [str(k) for k in list(props or {})[:64]]


#: Where a clause ends, for the negation check: a sentence's or clause's mark before a space or
#: the end, or a line break.
_CLAUSE_END = re.compile(r"[.!?;:]+(?=\s|$)|\n")


class Clauses(str):
    """A normalised text (:func:`riskrank.risk.normalise_text`: what the patterns read, matched
    as before) that knows where each of its clauses starts, so that a negation counts only in
    the clause of the match it negates ("No sandbox. Executes arbitrary shell commands" negates
    nothing)."""

    starts: tuple[int, ...]

    @classmethod
    def of(cls, *parts: str) -> Clauses:
        """The clauses of ``parts`` (each split further at its clause ends), normalised and
        joined by one space: the same string as normalising their concatenation."""
        pieces = [c for p in parts for c in (normalise_text(x) for x in _CLAUSE_END.split(p)) if c]
        out = cls(" ".join(pieces))
        starts, at = [], 0
        for c in pieces:
            starts.append(at)
            at += len(c) + 1
        out.starts = tuple(starts)
        return out


def _first_sentences(description: str) -> list[str]:
    """The description's first two sentences, another tool named in them (``use
    get_connection_string``) taken out: it is not this tool's action."""
    description = _strip_tool_names(description[:MAX_CHARS])
    return [s for s in _SENTENCE.split(description.strip()) if s.strip()][:2]


def scoped_text(name: str, description: str, schema: Mapping[str, Any] | None = None) -> Clauses:
    """What the scoped patterns read: the name's words, the description's first two sentences
    and the parameter names, normalised (``params`` marks where the names start), with its
    clauses' starts (:class:`Clauses`)."""
    sentences = _first_sentences(description)
    params = parameter_names(schema)
    # the name runs into the first clause, as the words run on in the normalised text
    parts = [split_name(name) + " " + (sentences[0] if sentences else ""), *sentences[1:]]
    if params:
        parts.append("params " + " ".join(split_name(p) for p in params))
    return Clauses.of(*parts)


def _negated(text: str, start: int, end: int) -> bool:
    """A negation in the few words before a match or between its verb and its object."""
    # the few words before the match, from a bounded slice (splitting the whole prefix of a long
    # description for every match made this the scan's hot spot); a word cut by the slice is dropped
    lo = max(0, start - 32 * _NEGATION_WINDOW)
    clause = max((c for c in getattr(text, "starts", ()) if c <= start), default=0)
    if clause > lo:  # the match's own clause only
        before = text[clause:start].split()[-_NEGATION_WINDOW:]
    else:
        before = text[lo:start].split()[1 if lo > 0 else 0:][-_NEGATION_WINDOW:]
    inside = text[start:end].split()[:-1]
    return any(w in _NEGATIONS for w in before + inside)


def _first(rx: re.Pattern[str], text: str) -> str | None:
    """The first match not negated, read clause by clause (:class:`Clauses`): a match never runs
    from one sentence into the next or into the parameter names, whose words it would splice
    ("retrieve the invoice for a booking" + "access token")."""
    starts = getattr(text, "starts", ())
    for m in rx.finditer(text):
        at = bisect.bisect_right(starts, m.start())  # the clause after the match's own
        if at < len(starts) and starts[at] < m.end():  # it runs on: read clause by clause from its own (rare)
            return _first_by_clause(rx, text, max(at - 1, 0))
        if not _negated(text, m.start(), m.end()):
            return m.group(0).strip()
    return None


def _first_by_clause(rx: re.Pattern[str], text: Clauses, first: int) -> str | None:
    """:func:`_first` from clause ``first`` on, each clause searched on its own."""
    starts = text.starts
    for lo, hi in zip(starts[first:], (*(s - 1 for s in starts[first + 1:]), len(text)), strict=True):
        for m in rx.finditer(text, lo, hi):
            if not _negated(text, m.start(), m.end()):
                return m.group(0).strip()
    return None


#: A subject that names the tool itself at the start of its description ("This tool", "It").
_SUBJECT = re.compile(r"(?:(?:this|the) (?:tool|function|endpoint|command|api|method|operation|action|server|plugin)s?|it) ")
#: How many words may come before the tool's own name in a subject that repeats it ("dbt show").
_SUBJECT_WORDS = 2


def _after_subject(name: str, sentence: str) -> str:
    """``sentence`` (normalised) from its verb on, after a subject that names the tool: "This
    tool deletes ...", "It deletes ...", or the tool's own name ("dbt show executes ..." under
    ``show``). The sentence a read-named tool's description opens with acts when its verb does,
    whatever names the tool before it."""
    text = normalise_text(sentence)
    # the subject and its verb in one clause: "List files; deletes nothing" opens with no subject
    first = normalise_text(_CLAUSE_END.split(sentence, maxsplit=1)[0])
    m = _SUBJECT.match(first)
    if m and len(first) > m.end():
        return text[m.end():]
    own = normalise_text(split_name(name)).split()
    words = first.split()
    for at in range(min(_SUBJECT_WORDS, len(words) - len(own) - 1) + 1):
        if own and words[at:at + len(own)] == own:
            return " ".join(text.split()[at + len(own):])
    return text


def name_reads(name: str) -> bool:
    """Whether a tool's name says it only reads: its first word is a read verb (``get_``,
    ``list_``), or it has a read verb and no action verb (``kubectl_get``)."""
    words = normalise_text(split_name(name)).split()
    if not words:
        return False
    return words[0] in READ_VERBS or (bool(set(words) & READ_VERBS) and not set(words) & ACT_VERBS)


def name_only_reads(name: str) -> bool:
    """Whether a tool's name reads (:func:`name_reads`) with no word that acts anywhere in it:
    ``get_and_delete_messages`` and ``search_and_replace`` act, whatever their first word. What
    the gateway's session guard asks before it lets a tool pass as one that only reads."""
    words = set(normalise_text(split_name(name)).split())
    return bool(words & READ_VERBS) and not words & ACT_VERBS


@functools.cache
def _any_of(kind: str) -> re.Pattern[str]:
    """One pattern that matches wherever one capability's pattern of ``kind`` (scoped, anywhere,
    raw) does. Most tools show no capability, and one scan of a text costs about a quarter less
    than a scan per capability; the capabilities' own patterns then run only on a text where it
    matched. Compiled on first use, not at import."""
    table = {"scoped": _SCOPED, "anywhere": _ANYWHERE, "raw": _RAW}[kind]
    return re.compile("|".join(f"(?:{rx.pattern})" for rx in table.values()))


def detect_capabilities(name: str, description: str, schema: Mapping[str, Any] | None = None) -> list[CapabilityHit]:
    """The dangerous capabilities a tool's definition shows, most severe first, each with the
    words that show it; a capability implied by a more severe one found is left out."""
    scoped = scoped_text(name, description or "", schema)
    whole = Clauses.of(split_name(name) + " " + _strip_tool_names((description or "")[:MAX_CHARS]))
    raw = (description or "")[:MAX_CHARS].lower()
    in_scoped, in_whole, in_raw = (_any_of(k).search(t) is not None for k, t in (("scoped", scoped), ("anywhere", whole), ("raw", raw)))
    if not (in_scoped or in_whole or in_raw):
        return []
    reads = name_reads(name)
    # A name that reads takes an action only from a description that opens with it ("Deletes
    # files older than a day" under ``list_files``): what such a tool's description says later
    # names the actions it reports on ("the resources a plan would delete").
    lead = Clauses.of(_after_subject(name, next(iter(_first_sentences(description or "")), ""))) if reads and in_scoped else ""
    hits = {}
    for cap in CAPABILITIES:
        if not in_scoped:
            quote = None
        elif reads and cap.acts:
            m = _SCOPED[cap.key].match(lead)
            quote = m.group(0).strip() if m else None
        else:
            quote = _first(_SCOPED[cap.key], scoped)
        if quote is None and in_whole and cap.key in _ANYWHERE:
            quote = _first(_ANYWHERE[cap.key], whole)
        if quote is None and in_raw and cap.key in _RAW:
            m = _RAW[cap.key].search(raw)
            quote = m.group(0).strip() if m else None
        if quote is not None:
            hits[cap.key] = CapabilityHit(cap.key, quote)
    for severe, mild in _SUBSUMES.items():
        if severe in hits:
            hits.pop(mild, None)
    return sorted(hits.values(), key=lambda h: (-h.floor, CAPABILITY_KEYS.index(h.key)))


def capability_floor(hits: Sequence[CapabilityHit]) -> int:
    """The rubric floor of a tool's capabilities (1 without any)."""
    return max((h.floor for h in hits), default=1)


def capability_matrix(tools: Sequence[Any]) -> np.ndarray:
    """[N, C] 0/1 matrix of every tool's capabilities (column order :data:`CAPABILITY_KEYS`), for
    ``tools`` with ``name``, ``description`` and ``parameters``: the level model's features."""
    out = np.zeros((len(tools), len(CAPABILITY_KEYS)), dtype=np.float32)
    for i, t in enumerate(tools):
        for h in detect_capabilities(t.name, t.description, getattr(t, "parameters", None)):
            out[i, CAPABILITY_KEYS.index(h.key)] = 1.0
    return out
