"""The bundled embedding model exported to ONNX, once (``rag.knowledge.onnx_model`` runs it
and gives the measured reasons): a float32 model for questions, an int8 one for documents.

Apart from the runtime because it needs torch and sentence-transformers: a service whose
exports are made (``make install``) never imports them for an int8 knowledge base.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer

from rag.knowledge.onnx_model import (
    FLOAT32_BITS,
    INPUTS,
    WEIGHT_BITS,
    onnxruntime_module,
    save_weights_apart,
)

OPSET = 17


def export_model(model_path: Path, target: Path, weight_bits: int = WEIGHT_BITS) -> Path:
    """Export the sentence-transformers model at ``model_path`` to ``target``: in int8, its
    weights of ``weight_bits`` (7 or 8), or in float32 (``FLOAT32_BITS``).

    Written to temporary files beside ``target`` and renamed into place, so a crash or
    a second process exporting at the same time never leaves a partial model."""
    if weight_bits not in (FLOAT32_BITS, 7, 8):
        raise ValueError(
            f"an export is float32 ({FLOAT32_BITS}) or int8 with 7 or 8 bits, not {weight_bits}"
        )
    onnxruntime_module()

    model = SentenceTransformer(str(model_path), device="cpu")
    layers = [type(layer).__name__ for layer in model]
    if layers != ["Transformer", "Pooling", "Normalize"] or model[1].pooling_mode != "mean":
        raise ValueError(f"{model_path}: only a mean-pooled, normalized model exports to int8")
    transformer = model[0].auto_model
    assert isinstance(transformer, torch.nn.Module)
    encoder = _MeanPooled(transformer).eval()
    sample = model.tokenizer(["an example"], return_tensors="pt")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".export-") as tmp:
        full = Path(tmp) / "float32.onnx"
        quantized = Path(tmp) / "int8.onnx"
        with warnings.catch_warnings(), torch.no_grad():
            # The TorchScript exporter: the dynamo one needs onnxscript, for the same graph.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                encoder,
                tuple(sample[name] for name in INPUTS),
                str(full),
                input_names=list(INPUTS),
                output_names=["embedding"],
                dynamic_axes={name: {0: "batch", 1: "tokens"} for name in INPUTS}
                | {"embedding": {0: "batch"}},
                opset_version=OPSET,
                dynamo=False,
            )
        if weight_bits == FLOAT32_BITS:
            import onnx  # loads protobuf's model classes: only here

            save_weights_apart(onnx.load(str(full)), target, Path(tmp))
            return target
        from onnxruntime.quantization import QuantType, quantize_dynamic  # loads onnx: only here

        quantize_dynamic(
            str(full),
            str(quantized),
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=weight_bits == 7,
            extra_options={"DefaultTensorType": 1},  # float, where shape inference stops
        )
        os.replace(quantized, target)
    return target


class _MeanPooled(torch.nn.Module):
    """The transformer with sentence-transformers' mean pooling and normalization, as
    one graph to export."""

    def __init__(self, transformer: torch.nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.transformer(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(mean, dim=-1)
