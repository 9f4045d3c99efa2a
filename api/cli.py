"""Command line: ``python -m api serve`` and ``python -m api ingest FILES...``."""

from __future__ import annotations

import os

# Must be set before huggingface_hub is imported: models load from local paths only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import logging
import sys
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path

import httpx
from tqdm import tqdm

from api.config import Settings
from rag.models import DocumentIn
from rag.sample import SUPPORTED_SUFFIXES, DocumentFileError, documents_from_file


def serve(settings: Settings) -> None:
    import uvicorn

    from api.main import create_app

    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")


def _expand(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(
                sorted(p for p in path.rglob("*") if p.suffix.lower() in SUPPORTED_SUFFIXES)
            )
        elif path.is_file():
            files.append(path)
        else:
            raise DocumentFileError(f"{path}: no such file or folder")
    return files


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
    files = _expand(paths)
    totals = {"added": 0, "updated": 0, "unchanged": 0}
    # Read and validate everything first: a bad line fails before anything is sent.
    docs = [doc for f in files for doc in documents_from_file(f)]
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
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
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
