"""When an answer repeats itself, and the stream guard that never shows the repeat."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from rag.chat.repetition import REPEAT_CHARS, RepeatGuard, normalized, repeats

LOOP = "The foreign key constraint is only enforced when foreign key constraints are created. "
PLAIN = (
    "Git stores objects in its database. The index holds the next commit, and the "
    "working tree holds the files you edit. Use git add to stage a change [1]."
)


def stream(text: str, pieces: list[str] | None = None) -> tuple[str, RepeatGuard]:
    guard = RepeatGuard()
    shown = "".join(guard.feed(p) for p in (pieces or re.findall(r"\S+|\s+", text)))
    return shown + guard.flush(), guard


def test_a_sentence_said_twice_repeats_and_a_shared_phrase_does_not() -> None:
    assert repeats(LOOP * 2)
    assert not repeats(LOOP)
    assert not repeats(PLAIN)
    assert not repeats("the foreign key " * 2)  # 32 characters, under the span
    assert repeats("EXCLUSIVE_LOCK_MODE_" * 4)  # one long token, no space at all
    said = "Same  SENTENCE across\nlines, said twice over here. "
    assert repeats(said + said.lower().replace("\n", " "))  # case and spacing aside


def test_the_guard_shows_text_that_does_not_repeat_unchanged() -> None:
    shown, guard = stream(PLAIN)
    assert shown == PLAIN and not guard.tripped


def test_the_guard_stops_a_loop_before_showing_the_repeat() -> None:
    shown, guard = stream("Kellerby. " + LOOP * 4)
    assert guard.tripped
    assert shown.startswith("Kellerby. " + LOOP.strip(" .")) and not repeats(shown)
    assert len(shown) < len("Kellerby. " + LOOP) + 1


def test_the_guard_stops_one_long_token_that_repeats_a_part_of_itself() -> None:
    shown, guard = stream("", ["EXCLUSIVE", "_LOCK", "_MODE"] * 30)
    assert guard.tripped and not repeats(shown)
    assert shown.startswith("EXCLUSIVE_LOCK_MODE") and len(shown) < 2 * REPEAT_CHARS


def test_the_first_delta_is_never_held() -> None:
    guard = RepeatGuard()
    assert guard.feed("The") == "The"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["alpha", "beta", "gamma", "delta", " ", "  ", "\n", ".", "X_Y"]),
        max_size=120,
    ),
    st.integers(min_value=1, max_value=7),
)
def test_the_shown_text_is_a_prefix_that_never_repeats(words: list[str], size: int) -> None:
    text = "".join(words)
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    shown, guard = stream(text, pieces)
    assert text.startswith(shown)
    assert not repeats(shown)
    if not repeats(text):
        assert shown == text and not guard.tripped
    else:
        assert guard.tripped


def test_normalized_keeps_one_character_per_character() -> None:
    assert normalized("A  B\n\tİ") == "a b İ"
