"""The knowledge graph's two embedding tables and the rotation its entity codes are turned
by: the state ``KnowledgeGraph`` keeps beside its snapshot, owned here in one place.

The entity table is quantized (a question scans every row); the triple table is read a
few thousand rows a question. A graph that writes files keeps the vectors a change adds
past a size in files in its folder (``kg.tail_rows``), and moves the vectors a start read
into memory (the disk refused their files then) out to files at its first change
(``kg.row_files.map_tables``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from kg import axes_file, row_files
from kg.embeddings import EmbeddingTable, EmbedFn, embed_checked
from kg.graph_file import GraphChange, Vectors
from kg.index import GraphSnapshot
from kg.rotation import Rotation


class GraphTables:
    """Entity-name and triple-text vectors, keyed by entity key and triple text.

    ``files``: the graph writes its folder (autosave): the tables spill there, and the
    rotation is kept there for the next start (``kg.axes_file``)."""

    def __init__(self, folder: Path, files: bool) -> None:
        self._folder = folder
        self._files = files
        self.axes: Rotation | None = None  # the entity codes' rotation the folder keeps
        self._read = False  # a start read the vectors into memory (not mapped)
        self.nodes = EmbeddingTable(quantized=True)
        self.triples = EmbeddingTable()
        self._spill()

    @property
    def in_memory(self) -> bool:
        """A start read the vectors into memory (the disk refused their files), and a
        change would write them out (``map_to_files``)."""
        return self._read and self._files

    def adopt(self, nodes: Vectors, triples: Vectors) -> None:
        """Take these vectors as the tables (entity codes made here are turned by
        ``axes``)."""
        self._read = bool(nodes.keys) and nodes.matrix.flags.writeable
        self.nodes = EmbeddingTable.adopt(
            nodes.keys,
            nodes.matrix,
            quantized=True,
            codes=nodes.codes,
            rotation=self.axes,
            rows=nodes.rows,
        )
        self.triples = EmbeddingTable.adopt(triples.keys, triples.matrix, rows=triples.rows)
        self._spill()

    def map_to_files(self) -> bool:
        """Move vectors read into memory to files and map them back; False where the
        disk refuses them (logged: they stay, and work as they are)."""
        tables = row_files.map_tables(self._folder, self.nodes, self.triples)
        if tables is None:
            return False
        self.nodes, self.triples = tables
        self._spill()
        self._read = False
        return True

    def embed_missing(
        self, embed: EmbedFn, nodes: Sequence[tuple[str, str]], texts: Sequence[str]
    ) -> tuple[list[str], list[str]]:
        """Embed, in one call, the node names (``(key, name)``, the first name given for
        a key wins) and triple texts that have no vector yet; return the node keys and
        texts embedded."""
        names = {key: name for key, name in reversed(nodes)}
        missing_nodes = self.nodes.missing(key for key, _ in nodes)
        missing_texts = self.triples.missing(texts)
        if not missing_nodes and not missing_texts:
            return [], []
        vectors = embed_checked(embed, [names[k] for k in missing_nodes] + missing_texts)
        self.nodes.add(missing_nodes, vectors[: len(missing_nodes)])
        self.triples.add(missing_texts, vectors[len(missing_nodes) :])
        return missing_nodes, missing_texts

    def repair(
        self, embed: EmbedFn, names: Mapping[str, str], texts: set[str]
    ) -> GraphChange | None:
        """Embed the vectors of entities (``names``: key to name) and triple ``texts`` that
        have none, and drop those of any other key; the change to write, None where there
        was none. Normally a no-op: a change writes its vectors with its edges (the old
        layout could lose some in a crash)."""
        added_nodes, added_texts = self.embed_missing(embed, list(names.items()), list(texts))
        dropped_nodes = self.nodes.retain(set(names))
        dropped_texts = self.triples.retain(texts)
        if not (added_nodes or added_texts or dropped_nodes or dropped_texts):
            return None
        return GraphChange(
            node_vectors=Vectors(added_nodes, self.nodes.gather(added_nodes)),
            triple_vectors=Vectors(added_texts, self.triples.gather(added_texts)),
            removed_node_vectors=dropped_nodes,
            removed_triple_vectors=dropped_texts,
        )

    def keep_axes(self, snapshot: GraphSnapshot) -> None:
        """Keep the entity codes' rotation for the next start (``kg.axes_file.keep``)."""
        if self._files:
            rotation = snapshot.node_vectors.matrix.rotation or self.nodes.rotation
            self.axes = axes_file.keep(self._folder, rotation, self.axes)

    def _spill(self) -> None:
        for table in (self.nodes, self.triples):
            table.spill_to(self._folder if self._files else None)
