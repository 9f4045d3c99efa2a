"""Questions in int8 (``QuestionPrecision``, ``rag.knowledge.onnx_blocks``): the question
model is made from the float32 export, its weights apart; its vectors stay within a
cosine of 0.999 of float32's, each question alone; where it cannot be written float32
embeds questions; the default and the settings pick the precision; the quantizer's
import leaves the host's logging alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from pydantic import ValidationError
from sentence_transformers import SentenceTransformer

from api.config import Settings
from rag.knowledge import onnx_blocks, onnx_model
from rag.knowledge.embedding import (
    Embedder,
    bundled_model_path,
    default_question_precision,
    shared_embedder,
)
from rag.knowledge.models import EmbeddingPrecision, QuestionPrecision

QUESTIONS = [
    "Which river runs through Lyon?",
    "How do I move my commits onto main?",
    "What does the warm registry record about prompt prefixes?",
]


@pytest.fixture(scope="module")
def float32_questions() -> np.ndarray:
    return Embedder(questions=QuestionPrecision.FLOAT32).embed_questions(QUESTIONS)


def test_int8_questions_run_on_onnx_runtime_close_to_float32(
    float32_questions: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not torch's; within a cosine of 0.999 of float32's (0.99946 at the least on the
    real corpus's 489 questions) but not float32's; each question alone, so a
    question's vector does not depend on the questions embedded with it."""
    embedder = Embedder(precision=EmbeddingPrecision.INT8, questions=QuestionPrecision.INT8)
    embedder.warm_up()

    def no_torch(*args: object, **kwargs: object) -> None:
        raise AssertionError("a question went through torch")

    monkeypatch.setattr(SentenceTransformer, "encode", no_torch)
    together = embedder.embed_questions(QUESTIONS)
    alone = np.concatenate([embedder.embed_questions([q]) for q in QUESTIONS])
    np.testing.assert_array_equal(together, alone)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    cosines = (together * float32_questions).sum(axis=1)
    assert cosines.min() > 0.999 and not np.allclose(together, float32_questions, atol=1e-6)


def test_the_question_model_quantizes_each_matrix_product_of_the_float32_export(
    tmp_path: Path,
) -> None:
    """Every product by a weight matrix becomes a ``MatMulNBits`` of 8 bits in blocks of
    32 with int8 products; the products of two activations (attention) stay; the weights
    are kept apart, readable as the model is; nothing is left beside it."""
    float32 = onnx_model.exported_path(
        bundled_model_path(), onnx_model.export_dir(), onnx_model.FLOAT32_BITS
    )
    Embedder(questions=QuestionPrecision.FLOAT32).warm_up()  # makes the export if missing
    target = onnx_blocks.blocks_path(tmp_path / float32.name)
    assert target.name.endswith("-int8-blocks32.onnx")
    onnx_blocks.quantize_blocks(float32, target)
    assert set(tmp_path.iterdir()) == {target, onnx_model.weights_file(target)}
    weights = onnx_model.weights_file(target)
    assert weights.stat().st_size > 10_000_000 > target.stat().st_size
    assert weights.stat().st_mode == target.stat().st_mode
    graph = onnx.load(str(target), load_external_data=False).graph
    blocks = [n for n in graph.node if n.op_type == "MatMulNBits"]
    attributes = {
        (a.name, a.i) for n in blocks for a in n.attribute if a.name != "K" and a.name != "N"
    }
    assert len(blocks) == 36  # six layers: query, key, value, output, two feed-forward
    assert attributes == {("bits", 8), ("block_size", 32), ("accuracy_level", 4)}
    assert sum(n.op_type == "MatMul" for n in graph.node) == 12  # attention's own products


def test_where_the_int8_question_model_cannot_be_written_float32_embeds_questions(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    float32_questions: np.ndarray,
) -> None:
    """Injected: the question model's quantization fails with a permission error (an
    installation whose folder is read-only, made before questions had an int8 model).
    The float32 export embeds questions, and the log says why and what to run."""

    def refused(float32_file: Path, target: Path) -> Path:
        raise PermissionError(13, "Permission denied", str(target.parent))

    monkeypatch.setattr(onnx_blocks, "quantize_blocks", refused)
    monkeypatch.setattr(onnx_blocks, "blocks_path", lambda f: tmp_path / "absent.onnx")
    embedder = Embedder(questions=QuestionPrecision.INT8)
    with caplog.at_level("WARNING", logger="rag.knowledge.embedding"):
        vectors = embedder.embed_questions(QUESTIONS)
    assert "embedding questions in float32 instead" in caplog.text
    assert "python -m rag.knowledge.embedding" in caplog.text
    np.testing.assert_allclose(vectors, float32_questions, atol=1e-6)


def test_a_bfloat16_knowledge_base_embeds_questions_as_its_documents() -> None:
    embedder = Embedder(precision=EmbeddingPrecision.BFLOAT16, questions=QuestionPrecision.INT8)
    np.testing.assert_array_equal(
        embedder.embed_questions(QUESTIONS[:1]), embedder.embed_texts(QUESTIONS[:1])
    )


@pytest.mark.parametrize(
    ("exact", "expected"), [(True, QuestionPrecision.INT8), (False, QuestionPrecision.FLOAT32)]
)
def test_the_default_is_int8_only_where_int8_products_are_exact(
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    exact: bool,
    expected: QuestionPrecision,
) -> None:
    monkeypatch.setattr(onnx_model, "exact_with_8bit_weights", lambda: exact)
    default_question_precision.cache_clear()
    request.addfinalizer(default_question_precision.cache_clear)  # the host's again
    assert default_question_precision() is expected
    assert Embedder().questions is expected


def test_the_setting_and_server_mode_pick_the_question_precision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WARMRAG_QDRANT_URL", raising=False)
    monkeypatch.delenv("WARMRAG_QUESTION_PRECISION", raising=False)
    assert Settings().question_default is None  # this host's default
    assert Settings(qdrant_url="http://qdrant:6333").question_default is QuestionPrecision.FLOAT32
    monkeypatch.setenv("WARMRAG_QUESTION_PRECISION", "int8")
    assert Settings(qdrant_url="http://qdrant:6333").question_default is QuestionPrecision.INT8
    monkeypatch.setenv("WARMRAG_QUESTION_PRECISION", "float32")
    chosen = Settings().question_default
    assert chosen is QuestionPrecision.FLOAT32
    assert shared_embedder(None, None, chosen).questions is QuestionPrecision.FLOAT32
    assert shared_embedder(None, None, chosen) is shared_embedder(None, None, chosen)
    monkeypatch.setenv("WARMRAG_QUESTION_PRECISION", "bfloat16")
    with pytest.raises(ValidationError, match="question_precision"):
        Settings()


def test_the_quantizers_import_leaves_the_hosts_logging_alone() -> None:
    """ONNX Runtime's quantizer calls ``logging.basicConfig`` at INFO when imported. A
    fresh interpreter that has not configured logging keeps its root logger as it was."""
    script = (
        "import logging\n"
        "from rag.knowledge import onnx_blocks\n"
        "quantizer = onnx_blocks._quantizer_module()\n"
        "print(len(logging.getLogger().handlers), logging.getLogger().level)\n"
        "print(logging.getLogger(quantizer.__name__).getEffectiveLevel())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0", "30", "30"]  # no handler, WARNING, WARNING
