"""The knowledge store: documents in, chunks and vectors stored, the graph kept in step.

Reading files (``files``, ``readers``) and checking what they and requests hold
(``input_checks``), chunking and embedding (``chunking``, ``embedding``, ``ingest``), what a
reader is shown of the chunks (``passages``), where the vectors live (``vectors``; ``edge`` and
``edge_worker``: the embedded Qdrant Edge shard in its own process), the committed state
(``base``, ``state`` over ``kvstore``'s SQLite, ``collection``, and ``commit``: how a write
commits, on which a shared Qdrant server adds ``lease`` and ``shared_commit``), and
``service``, which commits a change to
the vectors and the graph together and tells its listeners. It knows nothing of vLLM or
chats.
"""
