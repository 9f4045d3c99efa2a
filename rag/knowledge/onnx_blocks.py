"""The question model in int8: the float32 export's matrix products as ONNX Runtime's
``MatMulNBits``, 8-bit weights in blocks of 32 (``QuestionPrecision.INT8``).

Why: a question's embedding was the largest part of a retrieval at 100,000 chunks (5.5-6.4
ms of 13-18 through HTTP), and in float32 it is bound by its matrix products (5.6 of
7.1 ms in ONNX Runtime's profile of an 18-word-piece question: a dozen rows against 42 MB
of weights). Measured on the real corpus's 245 gold questions and their 244 rewordings
(AMD EPYC with AVX-512 VNNI, one thread, alternating, 2026-12-06):

Columns: ms a question (p50), least cosine to float32's, recall@3, MRR, rewordings that
build their question's prompt prefix (of 244), questions and rewordings that build
float32's prefix (of 489):

- float32: 5.61 ms, 1, 0.869, 0.774, 105, 489
- 8-bit, blocks of 32, zero points (this): 3.98 ms, 0.99946, 0.869, 0.774, 103, 454
- 8-bit, blocks of 32, symmetric: 3.88 ms, 0.99944, 0.869, 0.765, 105, 445
- 8-bit, blocks of 128, symmetric: 3.49 ms, 0.99855, 0.869, 0.765, 101, 431
- 4-bit, blocks of 32: 3.81 ms, 0.949 (not retrieved)

The documents' int8 (``quantize_dynamic``) scales a question's activations once per call:
its vectors were 0.983 from float32's at the least, and a question and its rewording
retrieved different chunks more often (173 of 245 pairs, float32 194). ``MatMulNBits``
with ``accuracy_level`` 4 scales them per block of 32 as well, so its noise is a tenth.

Made from the float32 export by ONNX Runtime's own quantizer (no torch), in about a
second, by ``make install`` or a first start; its weights are kept apart and mapped, as
the float32 export's are.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from types import ModuleType

from rag.knowledge.onnx_model import onnxruntime_module, save_weights_apart

#: The weights' bits and their block along each column (the table above).
BITS = 8
BLOCK_SIZE = 32
#: ``MatMulNBits``' int8 products: the activations quantized per block too.
ACCURACY_LEVEL = 4


def blocks_path(float32_file: Path) -> Path:
    """The question model made from the float32 export ``float32_file``: named after it
    (the bundled weights and ONNX Runtime's version), so a new one is made with it."""
    stem = float32_file.name.removesuffix(".onnx").removesuffix("-float32")
    return float32_file.with_name(f"{stem}-int8-blocks{BLOCK_SIZE}.onnx")


def quantize_blocks(float32_file: Path, target: Path) -> Path:
    """Quantize the float32 export ``float32_file`` into ``target`` (module docstring).

    Staged in a temporary folder beside ``target`` and renamed into place, so a crash or
    a second process doing the same never leaves a partial model."""
    import onnx  # loads protobuf's model classes: only here

    quantizer = _quantizer_module()
    model = onnx.load(str(float32_file))
    config = quantizer.DefaultWeightOnlyQuantConfig(
        block_size=BLOCK_SIZE, is_symmetric=False, accuracy_level=ACCURACY_LEVEL, bits=BITS
    )
    blocks = quantizer.MatMulNBitsQuantizer(
        model,
        bits=BITS,
        block_size=BLOCK_SIZE,
        is_symmetric=False,
        accuracy_level=ACCURACY_LEVEL,
        algo_config=config,
    )
    blocks.process()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".export-") as tmp:
        save_weights_apart(blocks.model.model, target, Path(tmp))
    return target


def _quantizer_module() -> ModuleType:
    """ONNX Runtime's ``MatMulNBits`` quantizer. Its import calls ``logging.basicConfig``
    at INFO, which would turn on the root logger of a process that has not configured
    logging yet, and it notes every node it skips at INFO: neither reaches the host."""
    onnxruntime_module()
    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)
    try:
        from onnxruntime.quantization import matmul_nbits_quantizer
    finally:
        root.removeHandler(guard)
    logging.getLogger(matmul_nbits_quantizer.__name__).setLevel(logging.WARNING)
    return matmul_nbits_quantizer
