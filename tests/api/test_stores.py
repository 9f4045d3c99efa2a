"""The stores the settings build (``api.stores``), over a real data folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.config import Settings
from api.stores import build_knowledge
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import EmbeddedIndex


def test_local_mode_refuses_a_folder_whose_vectors_moved_into_edge(
    tmp_path: Path, embedder: Embedder
) -> None:
    """Switching back to local mode after the move would open an empty store beside the
    shard, and every stored document would be unfindable: a start says so instead."""
    settings = Settings(data_dir=tmp_path, seed_sample_kb=False, kg_extraction=False)
    knowledge = build_knowledge(settings, embedder)
    knowledge.open()
    knowledge.close()
    local = Settings(
        data_dir=tmp_path,
        seed_sample_kb=False,
        kg_extraction=False,
        embedded_index=EmbeddedIndex.LOCAL,
    )
    with pytest.raises(RuntimeError, match="WARMRAG_EMBEDDED_INDEX=edge"):
        build_knowledge(local, embedder).open()
    assert not (tmp_path / "qdrant").exists()  # nothing was created beside the shard
