"""The bundled embedding model on ONNX Runtime: in int8 for documents, in float32 for
questions (and the base of their int8 model, ``onnx_blocks``).

Why not sentence-transformers' own ONNX backend: it needs ``optimum-onnx``, which
requires ``transformers<4.58``, and vLLM 0.32 needs transformers 5 (``optimum-intel``'s
OpenVINO backend asks for another torch as well). So the model is exported by
``onnx_export``, once, with ``torch.onnx`` from the weights the wheel installs (nothing
comes from a hub), its mean pooling and normalization included. For int8, its matrix
products are quantized by ``onnxruntime.quantization.quantize_dynamic``: int8 weights per
output channel, activations scaled per call. Running an export needs neither torch nor
transformers (its text is split by ``word_pieces``).

Questions run on the float32 export, or on the int8 model made from it
(``onnx_blocks``), not on the documents' int8 (``Embedder.embed_questions`` says why).
Measured by ``bench.question_runtime`` on the real corpus's 489 questions (2-core Xeon,
one thread, idle, 2026-12-05): torch 9.81 ms p50 a question, this export 4.87 ms, the
arithmetic of the matrix products 1.48 ms; the vectors at most 1.9e-7 apart, and every
question builds the same prompt prefix with either.

Each text runs alone. Measured on the real section's 1,047 chunks (AVX-512 host, one
thread, 2026-12-03): torch float32 15.5 chunks/s; the int8 model text by text 48.6 (3.1x),
in padded batches of 16 31.4. Batches are slower (padding) and make a text's vector
depend on its neighbours, because the activations' scale is one per call: the same
questions' dense recall@3 moved between 0.837 and 0.857 with the batching alone. Alone,
recall@3 was 0.865 (float32: 0.857), the vectors' cosine to float32's 0.983 at the
least (0.994 on average).

The weights have 7 bits (``WEIGHT_BITS``), so that every x86 CPU computes the same
vectors. ONNX Runtime multiplies uint8 activations by int8 weights; without VNNI or AMX
(AVX2, AVX-512 without VNNI) it does so with ``VPMADDUBSW``, which adds two products into
a saturating int16: with 8-bit weights, 255 x 127 x 2 overflows it, and the vectors, and
which near-ties they flip, would depend on the host. With 7-bit weights (-64..64, as
ONNX Runtime's ``reduce_range`` makes them for that case) the sum stays within int16
(255 x 64 x 2 = 32,640), so those CPUs compute exactly what VNNI computes. Measured on
the real section (2-core Xeon with VNNI, one thread, 2026-12-05): end to end with the
graph, 1.02-1.05x 8-bit weights' rate (three pairs); the vectors' cosine to float32's
0.964 at the least, 0.9925 on average (8 bits: 0.975, 0.9943); through the read path
recall@3 0.869 with either, and 105 of 244 rewordings build their question's prompt
prefix (8 bits 106, float32 104). Checked on a 2-core AMD EPYC with AVX2 alone
(2026-12-07): ``MatMulInteger`` with 7-bit weights exact, with 8-bit ones off by
millions at the worst case (``tests/rag/knowledge/test_embedding.py`` checks it on every
host that runs the tests); the real section's raw embedding 30.3-30.4 chunks/s against
float32's 15.4-15.6, end to end with the graph 14.6-14.9 against 9.3-9.5.
Knowledge bases embedded with 8-bit weights keep them (``Embedder.follow``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from rag.knowledge.word_pieces import WordPieces

if TYPE_CHECKING:
    import onnx

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: The weights' bits in a new int8 export (the module's docstring says why 7).
WEIGHT_BITS = 7
#: The float32 export's "bits": its weights are not quantized.
FLOAT32_BITS = 0
#: CPU flags of int8 products accumulated in int32 exactly whatever the weights' bits:
#: VNNI and AMX. Without them 8-bit weights can saturate (see the module's docstring).
EXACT_INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
#: CPU flags of the int8 multiply-adds ONNX Runtime uses on x86: AVX2 (every CPU with
#: VNNI or AMX has it too).
INT8_FLAGS = frozenset({"avx2"}) | EXACT_INT8_FLAGS


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's flags as the kernel lists them (x86; none where unreadable or on other
    architectures, whose ``/proc/cpuinfo`` calls them features)."""
    try:
        lines = cpuinfo.read_text(errors="replace").splitlines()
    except OSError:
        return frozenset()
    flags = next((line.partition(":")[2].split() for line in lines if line.startswith("flags")), [])
    return frozenset(flags)


def int8_in_hardware(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU multiplies int8 in hardware as ONNX Runtime uses it (``INT8_FLAGS``):
    exactly, with 7-bit weights."""
    return not INT8_FLAGS.isdisjoint(cpu_flags(cpuinfo))


def exact_with_8bit_weights(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU multiplies 8-bit weights exactly too (``EXACT_INT8_FLAGS``)."""
    return not EXACT_INT8_FLAGS.isdisjoint(cpu_flags(cpuinfo))


def export_dir() -> Path:
    """Where exported models are kept: the installation's own prefix (the virtual
    environment), since the file derives from an installed wheel. ``make install``
    exports the bundled model there; a start exports it if it is missing."""
    return Path(sys.prefix) / "share" / "warmrag"


def onnxruntime_module() -> ModuleType:
    """ONNX Runtime, imported with its telemetry off unless the operator set
    ``ORT_DISABLE_TELEMETRY`` otherwise. Imported with it on, 1.30 writes a telemetry
    database under ``~/.cache/Microsoft`` (2.2 MB, growing with each import) and a log
    file in ``/tmp`` (``mat-debug-<pid>.log``): a service must not write to its host's
    home or ``/tmp``. Only int8 needs ONNX Runtime: it is not imported with this module
    (a start's cost)."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime

    return onnxruntime


def exported_path(model_path: Path, folder: Path, weight_bits: int = WEIGHT_BITS) -> Path:
    """The file for the model at ``model_path``: in int8 with weights of ``weight_bits``
    (7 or 8), in float32 for ``FLOAT32_BITS``. Named by the weights' size and
    modification time and ONNX Runtime's version, so a new model or quantizer exports
    again instead of reusing a stale file. 8-bit weights keep the name they had before
    7-bit ones, so a file exported then is reused."""
    weights = model_path / "model.safetensors"
    stat = weights.stat()
    version = onnxruntime_module().__version__.replace(".", "_")
    number = {FLOAT32_BITS: "float32", 8: "int8"}.get(weight_bits, f"int8-w{weight_bits}")
    return folder / (
        f"{model_path.name}-{stat.st_size}-{stat.st_mtime_ns}-ort{version}-{number}.onnx"
    )


def weights_file(model_file: Path) -> Path:
    """Where a float32 export, and the question model quantized from it, keep their
    weights (``save_weights_apart``: mapped, not copied)."""
    return model_file.with_name(model_file.name + ".data")


def save_weights_apart(model: onnx.ModelProto, target: Path, tmp: Path) -> None:
    """Write ``model`` to ``target``, its weights in a file of their own
    (``weights_file``), which ONNX Runtime maps instead of copying into the process.
    Measured (the float32 export, one session, 2026-12-05): 41 MiB of the process's own
    memory against 116 with the weights inside the model, and the same time a question.
    Staged in ``tmp`` (a folder beside ``target``); the weights go in place first: a
    model in place always finds them."""
    import onnx  # loads protobuf's model classes: only here

    staged = tmp / target.name
    weights = weights_file(target)
    onnx.save_model(
        model,
        str(staged),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=weights.name,
        size_threshold=1024,
    )
    # onnx writes the weights readable by their owner alone; the image's user, not the
    # one who exported them, reads them as it reads the model.
    os.chmod(tmp / weights.name, staged.stat().st_mode & 0o777)
    os.replace(tmp / weights.name, weights)
    os.replace(staged, target)


class OnnxEncoder:
    """Runs an exported model: each text on its own, on ``threads`` threads."""

    def __init__(self, model_file: Path, pieces: WordPieces, threads: int) -> None:
        onnxruntime = onnxruntime_module()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(
            str(model_file), options, providers=["CPUExecutionProvider"]
        )
        self._pieces = pieces

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalized float32 rows, one per text."""
        rows = []
        for text in self._pieces.windows(texts):
            feed = {
                name: np.asarray([values], dtype=np.int64)
                for name, values in zip(
                    INPUTS, (text.ids, text.attention_mask, text.type_ids), strict=True
                )
            }
            rows.append(self._session.run(None, feed)[0][0])
        return np.asarray(rows, dtype=np.float32)
