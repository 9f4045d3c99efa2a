"""Triple extraction from text with spaCy dependency rules (no LLM).

Rules, per verb of each sentence:
- subject: ``nsubj``/``nsubjpass`` (and their conjuncts); a verb conjoined to another verb
  without its own subject borrows that verb's subject; in a relative clause the relative
  pronoun ("the woman who discovered radium") is replaced by the noun the clause modifies.
  Other pronouns are skipped: without coreference "she" would become a node.
- active voice: (subject, verb lemma [+ particle], direct object) and, for each prepositional
  object, (subject, verb lemma + preposition, object): "Curie moved to Paris" ->
  (Curie, move to, Paris).
- passive voice with an agent: the agent becomes the subject ("Polonium was discovered by
  Curie" -> (Curie, discover, Polonium)); without one the participle is kept, because its lemma
  reads badly ("Curie was born in Warsaw" -> (Curie, born in, Warsaw), not "bear in").
- copula: (subject, be, attribute), or with an "of"-like complement
  "Paris is the capital of France" -> (Paris, be capital of, France).
- negation is kept in the predicate ("not invent").

Then, per entity a kept triple joins, each prepositional modifier naming a noun becomes
(entity, preposition, noun): "Growers in the Douro valley use the Kestrel sensor" also gives
(Growers, in, Douro valley). Without it the place a sentence names would be no node (no verb
joins it) and no entity search could find it. "of" complements are part of the name already.

Entity phrases keep compound and flat names whole ("Marie Curie", "Nobel Prize"), with simple
adjectives ("radioactive elements") and one "of" complement ("University of Paris", "theory of
relativity"); leading determiners go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from spacy.language import Language
from spacy.tokens import Doc, Token

from kg.models import MAX_TERM_LENGTH, Triple, clean_term
from kg.nlp import load_nlp
from kg.normalize import LEADING_DETERMINERS, EntityNormalizer, default_normalizer

_SUBJECT_DEPS = frozenset({"nsubj", "nsubjpass"})
_NAME_DEPS = frozenset({"compound", "flat"})
_RELATIVE_PRONOUNS = frozenset({"who", "which", "that", "whom"})
_ENTITY_POS = frozenset({"NOUN", "PROPN", "NUM", "X"})
_MODIFIER_POS = frozenset({"ADJ", "PROPN", "NOUN"})
_NAME_POS = frozenset({"NOUN", "PROPN"})


class TripleExtractor:
    """Finds (subject, predicate, object) triples in text; see the module docstring for rules."""

    def __init__(
        self,
        nlp: Language | None = None,
        normalizer: EntityNormalizer | None = None,
        batch_size: int = 32,
    ) -> None:
        self._nlp = nlp
        self._normalizer = normalizer
        self._batch_size = batch_size

    @property
    def nlp(self) -> Language:
        """The spaCy pipeline, loaded on first use (shared by the whole process)."""
        if self._nlp is None:
            self._nlp = load_nlp()
        return self._nlp

    @property
    def normalizer(self) -> EntityNormalizer:
        """The entity normalizer used to drop duplicate triples."""
        if self._normalizer is None:
            self._normalizer = default_normalizer()
        return self._normalizer

    def extract(self, text: str) -> list[tuple[str, str, str]]:
        """Triples (display forms) found in ``text``, in sentence order, without duplicates."""
        return self._from_doc(self.nlp(prepare_text(text)))

    def extract_chunks(self, doc_id: str, chunks: Sequence[tuple[str, str]]) -> list[Triple]:
        """Triples of each ``(chunk_id, text)`` chunk of a document, with provenance."""
        return self.extract_documents({doc_id: chunks})[doc_id]

    def extract_documents(
        self, documents: Mapping[str, Sequence[tuple[str, str]]]
    ) -> dict[str, list[Triple]]:
        """``extract_chunks`` for several documents, parsed in one ``nlp.pipe`` stream so
        that a change of many short documents still fills the parser's batches."""
        items = [(doc_id, chunk) for doc_id, chunks in documents.items() for chunk in chunks]
        texts = [prepare_text(text) for _, (_, text) in items]
        triples: dict[str, list[Triple]] = {doc_id: [] for doc_id in documents}
        parsed = self.nlp.pipe(texts, batch_size=self._batch_size)
        for (doc_id, (chunk_id, _)), doc in zip(items, parsed, strict=True):
            for subject, predicate, obj in self._from_doc(doc):
                triples[doc_id].append(
                    Triple(
                        subject=subject,
                        predicate=predicate,
                        object=obj,
                        doc_id=doc_id,
                        chunk_id=chunk_id,
                        source="extracted",
                    )
                )
        return triples

    # -- rules --------------------------------------------------------------------------

    def _from_doc(self, doc: Doc) -> list[tuple[str, str, str]]:
        """Verb triples in sentence order, then the attachments of the entities they join
        (appended, so the verb triples keep their positions)."""
        found: list[tuple[str, str, str]] = []
        seen: set[tuple[str, str, str]] = set()
        joined: dict[int, Token] = {}
        for token in doc:
            for subject, predicate, obj in self._from_verb(token):
                if self._keep(subject, predicate, obj, found, seen):
                    joined.update({subject.i: subject, obj.i: obj})
        for _, entity in sorted(joined.items()):
            for head, predicate, obj in _attachments(entity):
                self._keep(head, predicate, obj, found, seen)
        return found

    def _keep(
        self,
        subject: Token,
        predicate: str,
        obj: Token,
        found: list[tuple[str, str, str]],
        seen: set[tuple[str, str, str]],
    ) -> bool:
        """Append the cleaned triple to ``found`` unless it is malformed, joins an entity to
        itself or repeats one already found (compared by normalized keys); True if kept."""
        triple = self._clean(subject, predicate, obj)
        if triple is None:
            return False
        key = (
            self.normalizer.normalize(triple[0]),
            triple[1].lower(),
            self.normalizer.normalize(triple[2]),
        )
        if key[0] == key[2] or key in seen:
            return False
        seen.add(key)
        found.append(triple)
        return True

    def _from_verb(self, verb: Token) -> Iterable[tuple[Token, str, Token]]:
        is_copula = verb.lemma_ == "be" and verb.pos_ in ("AUX", "VERB")
        if verb.pos_ != "VERB" and not is_copula:
            return
        subjects = _subjects(verb)
        if not subjects:
            return
        negation = "not " if any(c.dep_ == "neg" for c in verb.children) else ""
        if is_copula:
            yield from _copula(verb, subjects, negation)
            return
        passive = any(c.dep_ in ("nsubjpass", "auxpass") for c in verb.children)
        agents = [
            pobj
            for child in verb.children
            if child.dep_ == "agent"
            for pobj in _with_conjuncts(_pobjs(child))
        ]
        particle = " ".join(c.lower_ for c in verb.children if c.dep_ == "prt")
        lemma = verb.lemma_.lower() + (f" {particle}" if particle else "")
        if passive and agents:
            # "X was discovered by Y": Y discovered X; other prepositions belong to Y's act.
            for agent in agents:
                for subject in subjects:
                    yield agent, negation + lemma, subject
            actors, verb_text = agents, lemma
        else:
            actors = subjects
            verb_text = verb.lower_ + (f" {particle}" if particle else "") if passive else lemma
            # "Curie was awarded the Nobel Prize" has a direct object too.
            for obj in _with_conjuncts(c for c in verb.children if c.dep_ == "dobj"):
                for subject in subjects:
                    yield subject, negation + verb_text, obj
        for prep in verb.children:
            if prep.dep_ not in ("prep", "dative"):
                continue
            for pobj in _with_conjuncts(_pobjs(prep)):
                for actor in actors:
                    yield actor, f"{negation}{verb_text} {prep.lower_}", pobj

    def _clean(self, subject: Token, predicate: str, obj: Token) -> tuple[str, str, str] | None:
        subject_text = _phrase(subject)
        object_text = _phrase(obj)
        predicate = clean_term(predicate)
        if not subject_text or not object_text or not predicate:
            return None
        if max(len(subject_text), len(object_text), len(predicate)) > MAX_TERM_LENGTH:
            return None
        return subject_text, predicate, object_text


def _subjects(verb: Token) -> list[Token]:
    own = [c for c in verb.children if c.dep_ in _SUBJECT_DEPS]
    if not own and verb.dep_ == "conj" and verb.head.pos_ in ("VERB", "AUX"):
        # "Curie was born in Warsaw and moved to Paris": "moved" borrows "Curie".
        own = [c for c in verb.head.children if c.dep_ in _SUBJECT_DEPS]
    resolved: list[Token] = []
    for subject in _with_conjuncts(own):
        if subject.lower_ in _RELATIVE_PRONOUNS and verb.dep_ == "relcl":
            subject = verb.head
        if _is_entity(subject):
            resolved.append(subject)
    return resolved


def _copula(
    verb: Token, subjects: list[Token], negation: str
) -> Iterable[tuple[Token, str, Token]]:
    for attr in _with_conjuncts(c for c in verb.children if c.dep_ == "attr"):
        complements = [
            (prep, pobj)
            for prep in attr.children
            if prep.dep_ == "prep"
            for pobj in _with_conjuncts(_pobjs(prep))
        ]
        for subject in subjects:
            if complements and attr.pos_ == "NOUN":
                # "Paris is the capital of France" -> (Paris, be capital of, France)
                for prep, pobj in complements:
                    yield subject, f"{negation}be {_head_phrase(attr)} {prep.lower_}", pobj
            else:
                yield subject, f"{negation}be", attr


def _attachments(entity: Token) -> Iterable[tuple[Token, str, Token]]:
    """(entity, preposition, noun) for each prepositional modifier of an entity that a verb
    triple joins: "Growers in the Douro valley use ..." -> (Growers, in, Douro valley).

    It keeps a place or thing the text names as a node even when no verb joins it. Only
    nouns and names count as objects (not years or pronouns), and "of" is skipped: an "of"
    complement is part of the entity's own name ("University of Paris").
    """
    if entity.pos_ not in _NAME_POS:
        return
    for prep in entity.rights:
        if prep.dep_ != "prep" or prep.lower_ == "of":
            continue
        for pobj in _with_conjuncts(_pobjs(prep)):
            if pobj.pos_ in _NAME_POS:
                yield entity, prep.lower_, pobj


def _pobjs(prep: Token) -> list[Token]:
    return [c for c in prep.children if c.dep_ == "pobj"]


def _with_conjuncts(tokens: Iterable[Token]) -> list[Token]:
    """The tokens plus their conjuncts ("polonium and radium"), in order, once each."""
    out: list[Token] = []
    for token in tokens:
        for item in (token, *token.conjuncts):
            if item not in out:
                out.append(item)
    return out


def _is_entity(token: Token) -> bool:
    return token.pos_ in _ENTITY_POS or (
        token.pos_ == "PRON" and token.lower_ in _RELATIVE_PRONOUNS
    )


def _name_tokens(head: Token) -> list[Token]:
    """The head with its name modifiers (recursively): "Marie Curie", "Nobel Prize".

    Simple adjectives count too ("radioactive elements", "exclusive lock"): the small model
    often tags product names as adjectives ("Qdrant local mode"). Quantifiers and other stop
    words ("many", "other") do not, nor adjectives with their own modifiers.
    """
    tokens = [head]
    for child in head.lefts:
        if child.dep_ in _NAME_DEPS or (
            child.dep_ == "amod"
            and child.pos_ in _MODIFIER_POS
            and not child.is_stop
            and child.n_lefts + child.n_rights == 0
        ):
            tokens.extend(_name_tokens(child))
    for child in head.rights:
        if child.dep_ in _NAME_DEPS:
            tokens.extend(_name_tokens(child))
    return sorted(tokens, key=lambda t: t.i)


def _head_phrase(head: Token) -> str:
    """The name of a head without complements, leading determiners dropped."""
    return _join(_name_tokens(head))


def _phrase(head: Token) -> str:
    """Entity phrase: the name plus one "of" complement ("University of Paris")."""
    if head.pos_ == "PRON":
        return ""
    tokens = _name_tokens(head)
    for prep in head.rights:
        if prep.dep_ == "prep" and prep.lower_ == "of":
            pobjs = _pobjs(prep)
            if pobjs and pobjs[0].pos_ in ("NOUN", "PROPN"):
                tokens = [*tokens, prep, *_name_tokens(pobjs[0])]
            break
    return _join(tokens)


def prepare_text(text: str) -> str:
    """Drop Markdown headings (titles, not sentences) and unwrap lines, so the parser
    sees prose: a heading glued to the next sentence becomes a bogus subject."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return " ".join(line.strip() for line in lines if line.strip())


def _join(tokens: list[Token]) -> str:
    while tokens and tokens[0].lower_ in LEADING_DETERMINERS:
        tokens = tokens[1:]
    # Tokens need not be adjacent (a line break is a token of its own): put a space
    # wherever the source had whitespace or a gap.
    parts: list[str] = []
    for prev, token in zip([None, *tokens], tokens, strict=False):
        if prev is not None and (token.i != prev.i + 1 or prev.whitespace_):
            parts.append(" ")
        parts.append(token.text)
    return clean_term("".join(parts))
