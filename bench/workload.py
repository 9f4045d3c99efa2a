"""A seeded, reproducible benchmark workload: a corpus of fictional towns (three
documents each, so every question's top-3 is its town's documents) and questions
about them with paraphrases that normalize to the same key, drawn Zipf."""

from __future__ import annotations

import random
from dataclasses import dataclass

_SYLLABLES = [
    "ka", "lor", "ven", "dri", "mo", "sel", "tar", "quin", "bel", "orn", "fa", "zu",
    "mir", "hal", "pe", "rug", "sto", "vik", "ul", "nesh", "ga", "thim", "ob", "ra",
]  # fmt: skip
_CRAFTS = ["glass", "copper", "wool", "cheese", "paper", "clocks", "boats", "salt", "silk", "tea"]
_FESTIVALS = ["lantern", "harvest", "river", "snow", "bell", "kite", "bread", "music"]
_RIVERS = ["Alba", "Brenn", "Cuvo", "Dessa", "Eimer", "Fjor", "Gant", "Hollow", "Isk", "Jura"]


@dataclass(frozen=True)
class Town:
    name: str
    founded: int
    river: str
    craft: str
    festival: str
    population: int

    def documents(self) -> list[dict[str, object]]:
        n = self.name
        slug = n.lower()
        history = (
            f"{n} was founded in {self.founded} by settlers from the coast. The old chronicle "
            f"of {n} records that the first houses of {n} stood on a low hill above the "
            f"{self.river} river. During the following centuries {n} grew into a market town, "
            f"and the town council of {n} built a stone hall in its square. Travellers "
            f"describe {n} as quiet in winter and busy in summer."
        )
        geography = (
            f"The {self.river} river flows through {n} from the northern hills to the lake. "
            f"Three bridges cross the {self.river} in {n}, and the fields around {n} are "
            f"watered by it. The climate of {n} is mild, with rain in spring. {n} has about "
            f"{self.population} inhabitants, most of whom live within a short walk of the river."
        )
        economy = (
            f"{n} is known for its {self.craft}. Workshops in {n} have made {self.craft} for "
            f"generations, and merchants carry the {self.craft} of {n} to distant cities. "
            f"Every year {n} holds the {self.festival} festival, when the workshops open their "
            f"doors and the streets of {n} fill with visitors."
        )
        return [
            {"id": f"{slug}-history", "text": history, "metadata": {"town": n}},
            {"id": f"{slug}-geography", "text": geography, "metadata": {"town": n}},
            {"id": f"{slug}-economy", "text": economy, "metadata": {"town": n}},
        ]

    def questions(self) -> list[str]:
        n = self.name
        return [
            f"When was {n} founded?",
            f"Which river flows through {n}?",
            f"What is {n} known for?",
        ]


def towns(count: int, seed: int = 7) -> list[Town]:
    rng = random.Random(seed)
    names: set[str] = set()
    result = []
    while len(result) < count:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        if name in names:
            continue
        names.add(name)
        result.append(
            Town(
                name=name,
                founded=rng.randint(900, 1800),
                river=rng.choice(_RIVERS),
                craft=rng.choice(_CRAFTS),
                festival=rng.choice(_FESTIVALS),
                population=rng.randint(2, 90) * 1000,
            )
        )
    return result


def paraphrase(question: str, rng: random.Random) -> str:
    """Another spelling of the same question: it normalizes to the same key."""
    variants = [
        question,
        question.lower(),
        question.upper(),
        question.rstrip("?") + " ??",
        "  " + question.replace(" ", "  ") + " ",
        question.rstrip("?") + "!",
    ]
    return rng.choice(variants)


def zipf_stream(questions: list[str], length: int, s: float = 1.1, seed: int = 11) -> list[str]:
    """``length`` requests over ``questions`` with Zipf(s) popularity, paraphrased."""
    rng = random.Random(seed)
    order = list(questions)
    rng.shuffle(order)  # popularity independent of corpus order
    weights = [1.0 / (rank**s) for rank in range(1, len(order) + 1)]
    return [paraphrase(q, rng) for q in rng.choices(order, weights=weights, k=length)]
