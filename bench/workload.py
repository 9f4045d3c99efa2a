"""A seeded, reproducible benchmark workload: a corpus of fictional towns (three
documents each, so every question's top-3 is its town's documents) and questions
about them with paraphrases that normalize to the same key, drawn Zipf.

``Workload`` fixes everything one benchmark run uses: the corpus, the question set
(the towns users ask about are a subset of the corpus), the request streams, and
the document revisions a knowledge-base change ingests."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Generic, Protocol, Self, TypeVar

from rag.chat.query import normalize_query

_SYLLABLES = [
    "ka", "lor", "ven", "dri", "mo", "sel", "tar", "quin", "bel", "orn", "fa", "zu",
    "mir", "hal", "pe", "rug", "sto", "vik", "ul", "nesh", "ga", "thim", "ob", "ra",
]  # fmt: skip
_CRAFTS = ["glass", "copper", "wool", "cheese", "paper", "clocks", "boats", "salt", "silk", "tea"]
_FESTIVALS = ["lantern", "harvest", "river", "snow", "bell", "kite", "bread", "music"]
_RIVERS = ["Alba", "Brenn", "Cuvo", "Dessa", "Eimer", "Fjor", "Gant", "Hollow", "Isk", "Jura"]


class Topic(Protocol):
    """What the scenarios need of a subject users ask about: a town here, a section of
    Git's documentation in ``bench.real_corpus``."""

    @property
    def slug(self) -> str: ...
    @property
    def name(self) -> str: ...
    def questions(self) -> list[str]: ...
    def documents(self, revision: int = 0) -> list[dict[str, object]]:
        """Its documents; a ``revision`` > 0 is an edit a change re-ingests (first one
        is the one a change scenario ingests)."""
        ...


class AnyWorkload(Protocol):
    """What the scenarios need of a workload (``Workload``, ``bench.real_corpus.RealWorkload``)."""

    steady: list[str]
    restart: list[str]

    def documents(self, only_question_towns: bool = False) -> list[dict[str, object]]: ...
    def towns_by_traffic(self) -> Sequence[Topic]: ...
    def asked_question(self, town: Topic) -> str: ...


TopicT = TypeVar("TopicT", bound=Topic)


@dataclass
class TopicStreams(Generic[TopicT]):
    """What a workload derives from its topics and request streams (``Workload`` here,
    ``bench.real_corpus.RealWorkload``); each sets the four fields from its spec."""

    towns: list[TopicT] = field(init=False)  # the corpus's topics
    question_towns: list[TopicT] = field(init=False)  # the ones users ask about
    steady: list[str] = field(init=False)
    restart: list[str] = field(init=False)

    @property
    def questions(self) -> list[str]:
        return [q for t in self.question_towns for q in t.questions()]

    def documents(self, only_question_towns: bool = False) -> list[dict[str, object]]:
        chosen = self.question_towns if only_question_towns else self.towns
        return [d for t in chosen for d in t.documents()]

    def towns_by_traffic(self) -> list[TopicT]:
        """Asked topics, most requested first (steady and restart streams together)."""
        by_key = {normalize_query(q): t for t in self.question_towns for q in t.questions()}
        counts: Counter[str] = Counter()
        for question in self.steady + self.restart:
            counts[by_key[normalize_query(question)].slug] += 1
        return sorted(self.question_towns, key=lambda t: (-counts[t.slug], t.slug))

    def asked_question(self, town: Topic) -> str:
        """The topic's question asked most often in the streams (its first if none was)."""
        asked = Counter(normalize_query(q) for q in self.steady + self.restart)
        return max(town.questions(), key=lambda q: asked[normalize_query(q)])


@dataclass(frozen=True)
class Town:
    name: str
    founded: int
    river: str
    craft: str
    festival: str
    population: int

    @property
    def slug(self) -> str:
        return self.name.lower()

    def documents(self, revision: int = 0) -> list[dict[str, object]]:
        """The town's three documents; a ``revision`` > 0 rewrites its history (a
        different founding year and one more sentence), as an operator's update would."""
        n = self.name
        slug = self.slug
        founded = self.founded + 7 * revision
        revised = (
            f" The chronicle was revised in edition {revision + 1} after new records were found."
            if revision
            else ""
        )
        history = (
            f"{n} was founded in {founded} by settlers from the coast. The old chronicle "
            f"of {n} records that the first houses of {n} stood on a low hill above the "
            f"{self.river} river. During the following centuries {n} grew into a market town, "
            f"and the town council of {n} built a stone hall in its square. Travellers "
            f"describe {n} as quiet in winter and busy in summer.{revised}"
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
    result: list[Town] = []
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


class StreamSpec(Protocol):
    @property
    def steady_requests(self) -> int: ...
    @property
    def restart_requests(self) -> int: ...
    @property
    def zipf_s(self) -> float: ...
    @property
    def seed(self) -> int: ...


def request_streams(questions: list[str], spec: StreamSpec) -> tuple[list[str], list[str]]:
    """The steady stream, then the after-restart one: one Zipf draw, split."""
    stream = zipf_stream(
        questions, spec.steady_requests + spec.restart_requests, spec.zipf_s, seed=spec.seed + 4
    )
    return stream[: spec.steady_requests], stream[spec.steady_requests :]


def unrelated_document() -> dict[str, object]:
    """A document no town question retrieves: its ingest must not touch any warm entry."""
    text = (
        "Sourdough bread rises slowly because wild yeast and lactic bacteria ferment the "
        "dough. A starter of flour and water is fed every day, and bakers keep part of it "
        "for the next loaf. A long, cool fermentation gives the crumb its open structure "
        "and the crust its deep colour."
    )
    return {"id": "sourdough-bread", "text": text, "metadata": {"topic": "baking"}}


class Sized:
    """The two sizes the suite runs a workload's spec at: ``full()``, its defaults, and
    ``quick()``, with the smaller numbers of ``QUICK``."""

    QUICK: ClassVar[dict[str, int]] = {}

    @classmethod
    def full(cls) -> Self:
        return cls()

    @classmethod
    def quick(cls) -> Self:
        return cls(**cls.QUICK)


@dataclass(frozen=True)
class WorkloadSpec(Sized):
    """The knobs of a run over the towns."""

    QUICK: ClassVar[dict[str, int]] = {
        "towns": 60,
        "question_towns": 30,
        "steady_requests": 80,
        "restart_requests": 30,
    }

    towns: int = 700  # x3 documents of one chunk each: 2,100 chunks
    question_towns: int = 120  # x3 questions: 360 distinct questions
    steady_requests: int = 400
    restart_requests: int = 100
    zipf_s: float = 1.1
    seed: int = 7


@dataclass
class Workload(TopicStreams[Town]):
    """Corpus, questions and request streams of one run, all derived from the spec."""

    spec: WorkloadSpec

    def __post_init__(self) -> None:
        spec = self.spec
        if not 0 < spec.question_towns <= spec.towns:
            raise ValueError("question_towns must be between 1 and towns")
        self.towns = towns(spec.towns, spec.seed)
        self.question_towns = self.towns[: spec.question_towns]
        self.steady, self.restart = request_streams(self.questions, spec)
