"""The identifier rule and the rerank (``rag.chat.identifiers``), without a model."""

from __future__ import annotations

import pytest

from rag.chat.identifiers import IdentifierMatcher, identifiers, promote


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What does PRAGMA foreign_keys do?", ("foreign_keys",)),
        ("What does core.autocrlf do?", ("core.autocrlf",)),
        ("What does git merge --no-ff do?", ("--no-ff",)),
        ("What does --file=<path> do?", ("--file",)),
        ("When is sqlite3_open() slow?", ("sqlite3_open()",)),
        ("What does open() return?", ("open()",)),
        ("Explain `git log -p` to me", ("git log -p",)),
        ("Where does $GIT_DIR/config.worktree live?", ("$GIT_DIR/config.worktree",)),
        ("Is GIT_DIR read before HEAD?", ("GIT_DIR",)),
        # A predicted question from a man page's headings: no identifiers.
        ("git-tag(1): SYNOPSIS", ()),
        ("git-stash(1) Manual Page > DESCRIPTION", ()),
        # Not identifiers: prose, abbreviations, versions, short options, hyphenated words.
        ("How do I undo a merge?", ()),
        ("Is it fast, e.g. in version 2.0?", ()),
        ('What should I know about using "git commit -a" in git rm?', ()),
        ("What should I know about fast-forward merge in git merge?", ()),
        ("I need help", ()),
        # Command names only on request (measured: they hurt, see the module).
        ("What does git cherry-pick do?", ()),
        ("What does git-rm do?", ()),
    ],
)
def test_identifiers(question: str, expected: tuple[str, ...]) -> None:
    assert identifiers(question) == expected


def test_command_names_on_request() -> None:
    assert identifiers("What does git cherry-pick do?", commands=True) == ("cherry-pick",)
    assert identifiers("What does git-rm do?", commands=True) == ("git-rm",)
    assert identifiers("What does the cherry-pick do?", commands=True) == ()


def test_capitals_on_request() -> None:
    assert identifiers("What does PRAGMA foreign_keys do?", capitals=True) == (
        "PRAGMA",
        "foreign_keys",
    )
    assert identifiers("Is GIT_DIR read before HEAD?", capitals=True) == ("GIT_DIR", "HEAD")
    matcher = IdentifierMatcher.of("PRAGMA foreign_keys", capitals=True)
    assert matcher.count("PRAGMA foreign_keys = ON;") == 2
    assert matcher.count("pragma FOREIGN_KEYS.") == 1  # PRAGMA is case-sensitive


def test_each_identifier_once_in_order() -> None:
    assert identifiers("--ff or --no-ff, and --ff again?") == ("--ff", "--no-ff")


@pytest.mark.parametrize(
    ("question", "text", "count"),
    [
        ("PRAGMA foreign_keys", "PRAGMA foreign_keys = ON;", 1),
        ("PRAGMA foreign_keys", "pragma FOREIGN_KEYS.", 1),  # case aside
        ("PRAGMA foreign_keys", "PRAGMA defer_foreign_keys; foreign_key_check", 0),
        ("merge --ff", "use --ff-only or --no-ff", 0),
        ("merge --ff", "(--ff) fast-forwards", 1),
        ("core.eol", "Set core.eol.", 1),
        ("core.eol", "core.eolx or mycore.eol", 0),
        ("sqlite3_open()", "call sqlite3_open (path, &db)", 1),
        ("sqlite3_open()", "sqlite3_open_v2(path)", 0),
    ],
)
def test_whole_token_match(question: str, text: str, count: int) -> None:
    assert IdentifierMatcher.of(question).count(text) == count


def test_points_prefer_a_definition() -> None:
    matcher = IdentifierMatcher.of("What does git merge --abort do?")
    assert matcher.points("--abort:: Abort the current conflict resolution.") == 2
    assert matcher.points("## --abort\n\nAbort it.") == 2
    assert matcher.points("then git merge --abort restores it") == 1
    assert matcher.points("nothing here") == 0
    assert matcher.points("nothing here", label="OPTIONS > --abort") == 2


def test_promote_is_stable() -> None:
    dense = ["check", "list", "defer", "keys", "triggers"]
    texts = {
        "check": "PRAGMA foreign_key_check; reports violations",
        "list": "PRAGMA foreign_key_list(table); lists foreign keys",
        "defer": "PRAGMA defer_foreign_keys; needs foreign_keys on",  # a mention
        "keys": "PRAGMA foreign_keys;\nPRAGMA foreign_keys = boolean;",  # the definition
        "triggers": "PRAGMA recursive_triggers;",
    }
    matcher = IdentifierMatcher.of("What does PRAGMA foreign_keys do?")
    assert promote(dense, matcher, texts.__getitem__) == [
        "keys", "defer", "check", "list", "triggers"
    ]  # fmt: skip
    assert promote(dense, matcher, texts.__getitem__, define=False) == [
        "defer", "keys", "check", "list", "triggers"
    ]  # fmt: skip


def test_promote_without_identifiers_keeps_the_order() -> None:
    dense = ["b", "a", "c"]
    assert promote(dense, IdentifierMatcher.of("How do I merge?"), str) == dense
