"""The embedding model's precisions (``EmbeddingPrecision``): bfloat16 and int8 vectors
stay those of float32 within tolerance and rank passages the same on a small set; questions
run on ONNX Runtime (torch where that cannot be exported; their int8 in
``test_onnx_blocks``); the exported models are made once and reused; the setting picks the
process-wide embedder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from api.config import Settings
from rag.knowledge import onnx_blocks, onnx_export, onnx_model
from rag.knowledge.embedding import (
    Embedder,
    bundled_model_path,
    default_precision,
    shared_embedder,
)
from rag.knowledge.models import EmbeddingPrecision, QuestionPrecision
from rag.knowledge.onnx_model import int8_in_hardware

PASSAGES = [
    "Lyon is a city on the Rhone; its old town is listed by UNESCO.",
    "Graz is the capital of Styria, with a clock tower on the Schlossberg.",
    "A git rebase replays commits on top of another base commit.",
    "The warm registry records which prompt prefixes vLLM holds.",
]
QUESTIONS = ["Which river runs through Lyon?", "How do I move my commits onto main?"]


@pytest.fixture(scope="module")
def float32() -> Embedder:
    return Embedder(precision=EmbeddingPrecision.FLOAT32)


@pytest.mark.parametrize(
    ("precision", "runtime", "least_cosine"),
    [
        (EmbeddingPrecision.BFLOAT16, "torch bfloat16", 0.99),  # 0.996 on the real corpus
        (EmbeddingPrecision.INT8, "onnxruntime int8, 7-bit weights", 0.96),  # real corpus: 0.964
    ],
)
def test_a_precision_matches_float32_within_tolerance(
    float32: Embedder, precision: EmbeddingPrecision, runtime: str, least_cosine: float
) -> None:
    other = Embedder(precision=precision)
    assert float32.identity.endswith(", torch") and other.identity.endswith(f", {runtime}")
    full, reduced = float32.embed_texts(PASSAGES), other.embed_texts(PASSAGES)
    assert reduced.dtype == np.float32 and reduced.shape == full.shape
    np.testing.assert_allclose(np.linalg.norm(reduced, axis=1), 1.0, atol=1e-5)
    assert (full * reduced).sum(axis=1).min() > least_cosine
    ranks = [
        np.argsort(-(e.embed_texts(QUESTIONS) @ v.T), axis=1)[:, 0]
        for e, v in ((float32, full), (other, reduced))
    ]
    np.testing.assert_array_equal(ranks[0], ranks[1])
    np.testing.assert_array_equal(ranks[0], [0, 2])


def test_an_int8_vector_does_not_depend_on_the_texts_beside_it() -> None:
    """Each text runs alone: in padded batches its activations' scale, one per call,
    would depend on its neighbours (the real corpus's recall@3 moved by 0.02 with it)."""
    int8 = Embedder(precision=EmbeddingPrecision.INT8, batch_size=3)
    together = int8.embed_texts(PASSAGES)
    alone = np.concatenate([int8.embed_texts([text]) for text in PASSAGES])
    np.testing.assert_array_equal(together, alone)


def test_int8_embeds_questions_as_float32_does(float32: Embedder) -> None:
    """Its documents in int8, its questions as a float32 knowledge base embeds them (not
    in the documents' int8: a question and its rewording then rank the same chunks as in
    float32)."""
    int8 = Embedder(precision=EmbeddingPrecision.INT8)
    np.testing.assert_allclose(
        int8.embed_questions(QUESTIONS), float32.embed_questions(QUESTIONS), atol=1e-6
    )
    np.testing.assert_allclose(
        int8.embed_query(QUESTIONS[0]), float32.embed_query(QUESTIONS[0]), atol=1e-6
    )
    assert not np.allclose(int8.embed_texts(QUESTIONS), float32.embed_texts(QUESTIONS), atol=1e-3)


@pytest.mark.parametrize("precision", [EmbeddingPrecision.FLOAT32, EmbeddingPrecision.INT8])
def test_questions_run_on_onnx_runtime_in_float32(
    precision: EmbeddingPrecision, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Questions run on the float32 export, not through torch (half its time), and
    come out as torch computes them: what a knowledge base's chunks were ranked against
    before stays so."""
    torch_model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    expected = torch_model.encode(QUESTIONS, normalize_embeddings=True, convert_to_numpy=True)
    embedder = Embedder(precision=precision, questions=QuestionPrecision.FLOAT32)
    embedder.warm_up()

    def no_torch(*args: object, **kwargs: object) -> None:
        raise AssertionError("a question went through torch")

    monkeypatch.setattr(SentenceTransformer, "encode", no_torch)
    np.testing.assert_allclose(embedder.embed_questions(QUESTIONS), expected, atol=1e-6)
    assert embedder.model_path is not None
    exported = onnx_model.exported_path(
        embedder.model_path, onnx_model.export_dir(), onnx_model.FLOAT32_BITS
    )
    assert exported.name.endswith("-float32.onnx") and exported.exists()


def test_questions_fall_back_to_torch_where_their_export_cannot_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Injected: every export fails with a permission error (a read-only installation
    without the exports). A float32 knowledge base still answers, its questions through
    torch, and says why; int8 cannot embed its documents and says what to do."""
    monkeypatch.setattr(onnx_model, "export_dir", lambda: tmp_path / "share")

    def refused(model_path: Path, target: Path, weight_bits: int) -> Path:
        raise PermissionError(13, "Permission denied", str(target.parent))

    monkeypatch.setattr(onnx_export, "export_model", refused)
    embedder = Embedder(precision=EmbeddingPrecision.FLOAT32)
    with caplog.at_level("WARNING", logger="rag.knowledge.embedding"):
        vectors = embedder.embed_questions(QUESTIONS)
    assert "embedding questions with torch instead" in caplog.text
    assert str(tmp_path / "share") in caplog.text
    torch_model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    expected = torch_model.encode(QUESTIONS, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    refusal = r"cannot export the embedding model to .*share.*PRECISION=float32"
    with pytest.raises(OSError, match=refusal):
        Embedder(precision=EmbeddingPrecision.INT8).warm_up()


def test_the_onnx_models_are_exported_once_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_model, "export_dir", lambda: tmp_path / "share")
    first = Embedder(precision=EmbeddingPrecision.INT8, questions=QuestionPrecision.INT8)
    first.warm_up()
    assert first.model_path is not None
    float32 = onnx_model.exported_path(
        first.model_path, tmp_path / "share", onnx_model.FLOAT32_BITS
    )
    blocks = onnx_blocks.blocks_path(float32)
    exported = {
        onnx_model.exported_path(first.model_path, tmp_path / "share", onnx_model.WEIGHT_BITS),
        float32,
        blocks,
    }
    weights = onnx_model.weights_file(float32)
    apart = {weights, onnx_model.weights_file(blocks)}
    assert set(tmp_path.joinpath("share").iterdir()) == exported | apart  # no leftovers
    assert weights.stat().st_size > 80_000_000 > float32.stat().st_size  # mapped, not copied
    assert weights.stat().st_mode == float32.stat().st_mode  # whoever reads one reads both
    made = {path: path.stat().st_mtime_ns for path in exported}
    calls: list[Path] = []
    monkeypatch.setattr(onnx_export, "export_model", lambda *args: calls.append(args[1]))
    monkeypatch.setattr(onnx_blocks, "quantize_blocks", lambda *args: calls.append(args[1]))
    second = Embedder(precision=EmbeddingPrecision.INT8, questions=QuestionPrecision.INT8)
    np.testing.assert_array_equal(second.embed_texts(PASSAGES), first.embed_texts(PASSAGES))
    np.testing.assert_array_equal(
        second.embed_questions(QUESTIONS), first.embed_questions(QUESTIONS)
    )
    assert calls == [] and {path: path.stat().st_mtime_ns for path in exported} == made


def test_an_export_cut_off_between_its_two_files_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, float32: Embedder
) -> None:
    """Injected: the weights file of a float32 export whose model never reached its place
    (a crash between the two renames), with bytes that are not the weights. The next
    start exports again, and its questions are float32's."""
    monkeypatch.setattr(onnx_model, "export_dir", lambda: tmp_path / "share")
    model_file = onnx_model.exported_path(
        bundled_model_path(), tmp_path / "share", onnx_model.FLOAT32_BITS
    )
    model_file.parent.mkdir()
    onnx_model.weights_file(model_file).write_bytes(b"cut off")
    again = Embedder(precision=EmbeddingPrecision.FLOAT32)
    np.testing.assert_allclose(
        again.embed_questions(QUESTIONS), float32.embed_questions(QUESTIONS), atol=1e-6
    )
    assert model_file.exists() and onnx_model.weights_file(model_file).stat().st_size > 80_000_000


def test_an_identity_is_the_same_before_and_after_the_model_loads() -> None:
    """Knowledge bases are checked at open, which embeds nothing: the identity must not
    wait for the model."""
    fresh = Embedder(precision=EmbeddingPrecision.INT8)
    before = fresh.identity
    fresh.warm_up()
    assert fresh.identity == before == "model, 384 dims, onnxruntime int8, 7-bit weights"


def test_the_setting_picks_the_process_wide_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARMRAG_EMBEDDING_PRECISION", "bfloat16")
    precision = Settings().embedding_precision
    assert precision is EmbeddingPrecision.BFLOAT16
    assert shared_embedder(precision).precision is EmbeddingPrecision.BFLOAT16
    assert not shared_embedder(precision).follows
    assert shared_embedder(precision) is shared_embedder(precision)
    monkeypatch.delenv("WARMRAG_EMBEDDING_PRECISION")
    assert Settings().embedding_precision is None
    default = shared_embedder(Settings().embedding_precision)
    assert default is shared_embedder() and default.follows
    assert Embedder().precision is default_precision()  # the shared one may have followed


@pytest.mark.parametrize(
    ("flags", "int8", "exact_with_8bit_weights"),
    [
        ("fpu sse2 avx2 fma", True, False),  # VPMADDUBSW: exact with 7-bit weights only
        ("fpu avx2 avx512f avx512_vnni", True, True),
        ("fpu avx2 avx_vnni", True, True),
        ("fpu avx512f amx_tile amx_int8", True, True),
        ("fpu avx2 avx512f avx512_bf16", True, False),  # bf16 in hardware says nothing of int8
        ("fpu sse2 sse4_2", False, False),
    ],
)
def test_int8_in_hardware_is_avx2_and_exact_with_8bit_weights_only_with_vnni_or_amx(
    tmp_path: Path, flags: str, int8: bool, exact_with_8bit_weights: bool
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n\n")
    assert int8_in_hardware(cpuinfo) is int8
    assert onnx_model.exact_with_8bit_weights(cpuinfo) is exact_with_8bit_weights
    for absent in (tmp_path / "absent", arm_cpuinfo(tmp_path)):
        assert not int8_in_hardware(absent) and not onnx_model.exact_with_8bit_weights(absent)


def arm_cpuinfo(folder: Path) -> Path:
    """An arm64 ``/proc/cpuinfo``: its flags are "Features", none of them x86's."""
    path = folder / "cpuinfo-arm"
    path.write_text("processor\t: 0\nFeatures\t: fp asimd asimddp i8mm\nCPU part\t: 0xd0c\n\n")
    return path


def weight_range(model_file: Path) -> tuple[int, int]:
    """The least and greatest of the int8 weights in an exported model."""
    import onnx
    from onnx import numpy_helper

    weights = [
        numpy_helper.to_array(t)
        for t in onnx.load(str(model_file)).graph.initializer
        if t.data_type == onnx.TensorProto.INT8
    ]
    return min(int(w.min()) for w in weights), max(int(w.max()) for w in weights)


def test_a_new_int8_model_has_7_bit_weights() -> None:
    """So a CPU without VNNI (``VPMADDUBSW``: two products summed in a saturating int16)
    computes the vectors a CPU with it does: 255 x 64 x 2 < 32,767."""
    int8 = Embedder(precision=EmbeddingPrecision.INT8)
    int8.warm_up()
    assert int8.model_path is not None and int8.runtime.weight_bits == 7
    exported = onnx_model.exported_path(int8.model_path, onnx_model.export_dir())
    assert exported.name.endswith("-int8-w7.onnx")
    low, high = weight_range(exported)
    assert low >= -64 and high <= 64 and high - low > 100


def product_error(weight: int) -> int:
    """The most ONNX Runtime's ``MatMulInteger`` on this CPU differs from the exact int32
    product, for the uint8 activations at the top of their range (255) against int8
    weights of ``weight`` and a few below: the documents' int8 model's products
    (``quantize_dynamic``), at their worst case for a saturating int16 pair sum."""
    import onnx
    from onnx import TensorProto, helper

    rows, depth, columns = 4, 64, 8
    rng = np.random.default_rng(3)
    activations = np.full((rows, depth), 255, np.uint8)
    activations[0] = rng.integers(0, 256, depth)
    weights = rng.integers(weight - 3, weight + 1, (depth, columns)).astype(np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w"], ["y"])],
        "product",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [rows, depth])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [rows, columns])],
        [helper.make_tensor("w", TensorProto.INT8, weights.shape, weights.tobytes(), raw=True)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    session = onnx_model.onnxruntime_module().InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    product = session.run(None, {"a": activations})[0].astype(np.int64)
    return int(np.abs(product - activations.astype(np.int64) @ weights.astype(np.int64)).max())


def test_this_cpu_multiplies_7bit_weights_exactly() -> None:
    """What the 7-bit weights rest on, checked on the CPU that runs the tests: with
    weights up to 64 ONNX Runtime's int8 product is exact; with 8-bit weights it is exact
    only where ``exact_with_8bit_weights`` says so (VNNI, AMX). Measured on a 2-core AMD
    EPYC with AVX2 alone (2026-12-07): 8-bit weights off by up to millions, 7-bit
    exact. Other architectures multiply int8 otherwise; their default is float32."""
    assert product_error(64) == 0  # reduce_range's weights: -64..64
    assert product_error(-61) == 0
    if int8_in_hardware():
        assert (product_error(127) == 0) is onnx_model.exact_with_8bit_weights()


def test_a_knowledge_base_embedded_with_8bit_weights_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """int8 had 8-bit weights before (recorded as "onnxruntime int8"): a knowledge base
    embedded so is followed with them, by the default and by int8 asked for, and a CPU
    without VNNI or AMX says that it may compute them otherwise."""
    seven = Embedder(precision=EmbeddingPrecision.INT8)
    sevens = seven.embed_texts(PASSAGES)
    recorded = seven.identity.removesuffix(", 7-bit weights")
    assert recorded.endswith(", 384 dims, onnxruntime int8")
    monkeypatch.setattr(onnx_model, "export_dir", lambda: tmp_path / "share")
    monkeypatch.setattr(onnx_model, "exact_with_8bit_weights", lambda: False)
    asked = Embedder(precision=EmbeddingPrecision.INT8)
    for embedder in (Embedder(), asked):
        embedder.follow(recorded)
        assert embedder.identity == recorded and embedder.runtime.weight_bits == 8
    float32 = Embedder(precision=EmbeddingPrecision.FLOAT32)
    float32.follow(recorded)  # another precision asked for: refused by the knowledge base
    assert float32.runtime.weight_bits == 0
    with caplog.at_level("WARNING", logger="rag.knowledge.embedding"):
        eights = asked.embed_texts(PASSAGES)
    assert "8-bit weights" in caplog.text and "Re-ingest" in caplog.text
    assert asked.model_path is not None
    exported = onnx_model.exported_path(asked.model_path, tmp_path / "share", 8)
    assert exported.name.endswith("-int8.onnx")  # the name it had: a file exported then is reused
    assert weight_range(exported) == (-127, 127)
    assert not np.array_equal(eights, sevens) and (eights * sevens).sum(axis=1).min() > 0.97


def test_the_default_precision_is_int8_where_the_cpu_multiplies_int8(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for in_hardware, expected in (
        (True, EmbeddingPrecision.INT8),
        (False, EmbeddingPrecision.FLOAT32),
    ):
        monkeypatch.setattr(onnx_model, "int8_in_hardware", lambda v=in_hardware: v)
        default_precision.cache_clear()
        try:
            assert default_precision() is expected
            assert Embedder().precision is expected
        finally:
            default_precision.cache_clear()


def test_onnx_runtime_writes_nothing_to_the_home_folder_or_tmp(tmp_path: Path) -> None:
    """Imported with its telemetry on, ONNX Runtime 1.30 writes a database under
    ``~/.cache/Microsoft`` and ``/tmp/mat-debug-<pid>.log``; the one import path turns
    it off. A fresh interpreter, without the variable the Makefile sets."""
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env["HOME"] = str(tmp_path)
    script = (
        "import os\n"
        "from rag.knowledge.onnx_model import onnxruntime_module\n"
        "onnxruntime_module().SessionOptions()\n"
        "print(os.getpid())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    pid = done.stdout.split()[-1]
    assert list(tmp_path.iterdir()) == []
    assert not Path(f"/tmp/mat-debug-{pid}.log").exists()


@pytest.mark.parametrize(
    ("precision", "imported"),
    [
        (EmbeddingPrecision.INT8, ""),
        (EmbeddingPrecision.FLOAT32, "sentence_transformers torch transformers"),
    ],
)
def test_only_a_precision_on_torch_imports_it(precision: EmbeddingPrecision, imported: str) -> None:
    """int8 embeds documents and questions, and sizes chunks, on ONNX Runtime and
    ``tokenizers`` alone: torch, sentence-transformers and transformers cost a start
    3.0 s and 166 MiB. A fresh interpreter; the exports are ``make install``'s."""
    script = (
        "import sys\n"
        "from rag.knowledge.embedding import Embedder\n"
        "from rag.knowledge.models import EmbeddingPrecision\n"
        f"embedder = Embedder(precision=EmbeddingPrecision({precision.value!r}))\n"
        f"embedder.embed_texts({PASSAGES!r}); embedder.embed_questions({QUESTIONS!r})\n"
        "assert embedder.tokenizer('a git rebase') == [101, 1037, 21025, 2102, 2128, 15058, 102]\n"
        "stack = ('sentence_transformers', 'torch', 'transformers')\n"
        "print(' '.join(m for m in stack if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == imported
