"""One name, one tool: invisible characters and look-alike names (riskrank.names)."""

from __future__ import annotations

import pytest

from riskrank.errors import RegistryError
from riskrank.first_stage import LexicalIndex
from riskrank.names import looks_like_another, skeleton
from riskrank.registry import ToolRegistry
from riskrank.serving.gateway.core import record_registry

CYRILLIC = "d\u0435l\u0435t\u0435_fil\u0435s"  # Cyrillic e


def test_skeleton_folds_look_alikes_and_keeps_ascii():
    assert skeleton(CYRILLIC) == skeleton("delete_files") == skeleton("\uff24\uff25\uff2c\uff25\uff34\uff25_files")
    assert skeleton("l1st") == "l1st" and looks_like_another(CYRILLIC) and not looks_like_another("delete_files")
    assert not looks_like_another("天気")


@pytest.mark.parametrize("ch", ["\u3164", "\uffa0", "\u115f", "\u1160", "\u2800", "\u034f", "\ufe0f", "\u17b4", "\u00a0"])
def test_invisible_characters_in_a_name_are_refused(ch):
    with pytest.raises(RegistryError, match=f"(invisible|unprintable) character.*U\\+{ord(ch):04X}"):
        ToolRegistry.from_data([{"name": "read_text" + ch + "_file", "description": "x"}], fmt="plain")


def test_look_alike_names_are_refused_or_skipped():
    records = [{"name": "delete_files", "description": "delete"}, {"name": CYRILLIC, "description": "read"}]
    with pytest.raises(RegistryError, match="look alike"):
        ToolRegistry.from_data(records, fmt="plain")
    reg, skipped = record_registry(records, "upstreams")
    assert reg.names == ["delete_files"] and "looks like 'delete_files'" in skipped[CYRILLIC]


def test_a_look_alike_name_is_never_pinned_as_named():
    reg = ToolRegistry.from_data([{"name": CYRILLIC, "description": "delete files"},
                                  {"name": "list_files", "description": "list files"}], fmt="plain")
    index = LexicalIndex.from_registry(reg)
    assert index.identifier_like.tolist() == [False, True]


def test_the_skeleton_table_equals_the_plain_fold():
    """skeleton's one translate table equals folding character by character (the confusables'
    representative, invisible characters dropped), and its space separators are Unicode's."""
    import random
    import unicodedata

    from riskrank import names

    assert sorted(names.SPACE_SEPARATORS) == [c for c in range(0x110000) if c != 0x20 and unicodedata.category(chr(c)) == "Zs"]
    rep = names._representatives()

    def plain(name: str) -> str:
        folded = unicodedata.normalize("NFKC", name).casefold()
        return "".join(rep.get(ch, ch) for ch in folded if not names.is_invisible(ch)).casefold()

    rng = random.Random(7)
    pool = [chr(c) for c in [*range(0x20, 0x2100), *range(0xFE00, 0xFF70), *range(0xE0000, 0xE0080), 0x3164, 0x115F, 0x3000]]
    for _ in range(5000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 16)))
        assert names.skeleton(text) == plain(text), repr(text)
