"""When an answer repeats itself, and a stream guard that never shows the repeat.

Small models loop: on a real product manual the bundled SmolLM2-135M repeated one sentence
until ``max_tokens`` in three of five answers, and once a single long identifier with no
space. One definition serves the service and the benchmark: an answer *repeats* when a span
of at least ``REPEAT_CHARS`` characters (lower-cased, whitespace collapsed) occurs twice.
48 characters are about eight words: a sentence said twice trips it, a shared
phrase ("the foreign key") does not, and so does a long token that repeats a part of itself
("LOCK_MODE_LOCK_MODE_…"), which no word-level n-gram sees.

``RepeatGuard`` applies it to a stream without delaying the first token: it holds back only
the text that, so far, repeats earlier text (usually a few characters, released as soon as
the answer diverges), and when that held span reaches ``REPEAT_CHARS`` it stops the answer
there. Nothing of the repeat is shown, so the held span is dropped.
"""

from __future__ import annotations

import re

#: The shortest span whose second occurrence makes an answer repetitive.
REPEAT_CHARS = 48

_SPACE = re.compile(r"\s+")


def normalized(text: str) -> str:
    """Lower-cased, with each run of whitespace one space. A character whose lower case
    is longer (``İ``) is kept as it is, so each character maps to one."""
    return "".join(_lower(c) for c in _SPACE.sub(" ", text))


def _lower(char: str) -> str:
    low = char.lower()
    return low if len(low) == 1 else char


def repeats(text: str, span: int = REPEAT_CHARS) -> bool:
    """Whether some ``span`` characters of ``text`` (normalized) occur twice."""
    norm = normalized(text)
    seen: set[str] = set()
    for start in range(len(norm) - span + 1):
        piece = norm[start : start + span]
        if piece in seen:
            return True
        seen.add(piece)
    return False


class RepeatGuard:
    """Feeds on an answer's deltas and says what may be shown now.

    ``feed`` returns the text that is safe to show; ``tripped`` turns True when the held
    span repeats ``span`` characters of earlier text, and from then on ``feed`` returns
    nothing. ``flush`` releases what is held at the end of an answer that did not trip.
    """

    def __init__(self, span: int = REPEAT_CHARS) -> None:
        self.span = span
        self.tripped = False
        self._text = ""  # the normalized answer so far, shown and held
        self._raw_held = ""  # the raw text not yet shown
        self._held = 0  # characters of ``_text``'s end that repeat earlier text

    def feed(self, delta: str) -> str:
        if self.tripped:
            return ""
        self._raw_held += delta
        # Whitespace is collapsed across deltas: a run that spans two stays one space.
        addition = normalized(delta)
        if addition.startswith(" ") and self._text.endswith(" "):
            addition = addition[1:]
        for char in addition:
            self._text += char
            self._held = self._repeating_suffix(self._held + 1)
            if self._held >= self.span:
                self.tripped = True
                return ""
        return self._release()

    def flush(self) -> str:
        """What is still held, once the answer has ended without a repeat."""
        if self.tripped:
            return ""
        self._held = 0
        return self._release()

    def _repeating_suffix(self, length: int) -> int:
        """The longest suffix of the text, at most ``length`` long, that also occurs
        ending earlier in the text."""
        text = self._text
        while length > 0 and text.find(text[-length:], 0, len(text) - 1) < 0:
            length -= 1
        return length

    def _release(self) -> str:
        """Show the raw text up to where the held (normalized) span begins."""
        keep = self._held
        if keep == 0:
            shown, self._raw_held = self._raw_held, ""
            return shown
        # Map the held normalized characters back onto the raw tail: walk it from the
        # end, counting characters as ``normalized`` would.
        raw = self._raw_held
        cut = len(raw)
        counted = 0
        while cut > 0 and counted < keep:
            cut -= 1
            if raw[cut].isspace():
                while cut > 0 and raw[cut - 1].isspace():
                    cut -= 1
            counted += 1
        shown, self._raw_held = raw[:cut], raw[cut:]
        return shown
