"""Command line: ``python -m api serve`` and ``python -m api ingest FILES...``."""

from __future__ import annotations

import os

# Must be set before huggingface_hub is imported: models load from local paths only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Importing the model stack creates torch's compile-cache folder, in /tmp unless told
# otherwise: keep it in the data folder, as `make run` does.
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR",
    os.path.join(
        os.path.abspath(os.environ.get("WARMRAG_DATA_DIR", "data")), "cache", "torchinductor"
    ),
)

import argparse
import logging
import sys
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path

import httpx
from asgi_correlation_id import CorrelationIdFilter
from tqdm import tqdm

from api.config import Settings
from rag.models import DocumentIn
from rag.sample import SUPPORTED_SUFFIXES, DocumentFileError, documents_from_file

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(correlation_id)s]: %(message)s"


def configure_logging() -> None:
    """One format for warmrag's and uvicorn's lines, each with its request's id (``-``
    outside a request), the id that the response's ``X-Request-ID`` header carries."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.addFilter(CorrelationIdFilter(default_value="-"))


def serve(settings: Settings) -> None:
    import uvicorn

    from api.main import create_app

    # log_config=None: uvicorn's loggers propagate to the root handler configured above.
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        log_config=None,
    )


def _expand(paths: Sequence[str]) -> list[tuple[Path, Path]]:
    """Each file to read with the root its id is relative to: a folder given (searched
    recursively), or the folder of a file given."""
    files: list[tuple[Path, Path]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix.lower() in SUPPORTED_SUFFIXES)
            files.extend((p, path) for p in found if p.is_file())
        elif path.is_file():
            files.append((path, path.parent))
        else:
            raise DocumentFileError(f"{path}: no such file or folder")
    return files


def read_documents(paths: Sequence[str]) -> list[DocumentIn]:
    """Every document in ``paths``, validated; ``DocumentFileError`` for a bad file or line,
    or for two documents with one id (e.g. ``a/x.md`` given as two roots' ``x.md``)."""
    docs: list[DocumentIn] = []
    sources: dict[str, Path] = {}
    for file, root in _expand(paths):
        for doc in documents_from_file(file, root):
            if doc.id in sources:
                raise DocumentFileError(
                    f"{file}: document id {doc.id!r} is also the id of a document in "
                    f"{sources[doc.id]}; give their common folder instead"
                )
            sources[doc.id] = file
            docs.append(doc)
    return docs


def _batches(docs: Iterator[DocumentIn], size: int) -> Iterator[list[DocumentIn]]:
    while batch := list(islice(docs, size)):
        yield batch


def ingest(settings: Settings, paths: Sequence[str], url: str | None, batch_size: int) -> int:
    """Send files to a running server's ``/admin/documents`` in batches, with progress."""
    token = settings.admin_token.get_secret_value() if settings.admin_token else None
    if not token:
        print("error: set WARMRAG_ADMIN_TOKEN to the server's admin token", file=sys.stderr)
        return 2
    base = url or f"http://{settings.host}:{settings.port}"
    totals = {"added": 0, "updated": 0, "unchanged": 0}
    # Read and validate everything first: a bad line fails before anything is sent.
    docs = read_documents(paths)
    with (
        httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=600
        ) as client,
        tqdm(total=len(docs), unit="doc", desc="ingest") as bar,
    ):
        for batch in _batches(iter(docs), batch_size):
            body = {"documents": [d.model_dump() for d in batch]}
            try:
                resp = client.post("/admin/documents", json=body)
            except httpx.HTTPError as exc:
                print(f"\nerror: cannot reach warmrag at {base}: {exc}", file=sys.stderr)
                return 1
            if resp.status_code != 200:
                print(f"\nerror {resp.status_code}: {resp.text}", file=sys.stderr)
                return 1
            result = resp.json()
            for key in totals:
                totals[key] += len(result[key])
            bar.update(len(batch))
            bar.set_postfix(totals, kb_version=result["kb_version"])
    print(f"added {totals['added']}, updated {totals['updated']}, unchanged {totals['unchanged']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="warmrag", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the service (settings from WARMRAG_* variables)")
    p_ingest = sub.add_parser("ingest", help="send .txt/.md/.jsonl files to a running service")
    p_ingest.add_argument("paths", nargs="+", help="files or folders")
    p_ingest.add_argument("--url", help="service URL (default: WARMRAG_HOST:WARMRAG_PORT)")
    p_ingest.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    configure_logging()
    settings = Settings()
    if args.command == "serve":
        serve(settings)
        return 0
    try:
        return ingest(settings, args.paths, args.url, args.batch_size)
    except DocumentFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
