"""``warmrag``: run the service, and operate a running one from a terminal.

``serve`` runs the service here; every other command talks to a running service over its
HTTP API (``--url``, or ``WARMRAG_URL``, default ``http://WARMRAG_HOST:WARMRAG_PORT``),
with the admin token from ``WARMRAG_ADMIN_TOKEN`` and an API key, where the service wants
one, from ``WARMRAG_API_KEY``. ``ingest`` and ``delete`` also run ``--embedded``: on the
data folder's stores in this process, while no service holds them (``api.embedded``).
Exit status: 0 when everything asked for was done, 1 when something failed, 2 for bad
input (nothing is sent then).

Typer builds the commands, their ``--help`` and argument checks from the signatures;
rich draws the progress bar and the tables.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import api.environment  # noqa: F401  (first: the process environment the model stack reads)
from api.client import ServiceError, WarmragClient
from api.config import Settings
from api.logs import configure_logging
from api.schemas import ChatResponse
from api.tally import IngestTally
from rag.chat.results import CacheInfo, FinishReason, Served, Timings, WarmState
from rag.knowledge.files import SUPPORTED_SUFFIXES, DocumentFileError, read_sources

if TYPE_CHECKING:
    from api.embedded import EmbeddedService

#: What a chat's ``cache.served`` says, and the registry's detail where it adds one.
SERVED_LABELS = {
    Served.WARM: "warm hit",
    Served.CACHED: "cached by vLLM",
    Served.COLD: "cold",
}
WARM_STATE_DETAILS = {
    WarmState.PARTIAL: "partly warm",
    WarmState.EVICTED: "warm prefix evicted",
}

app = typer.Typer(
    name="warmrag",
    help="Run warmrag, and operate a running warmrag from a terminal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _out() -> Console:
    """Standard output, made per command so that its width is the terminal's (or
    ``COLUMNS``) at the time."""
    return Console(highlight=False)


def _err() -> Console:
    return Console(stderr=True, highlight=False)


UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="WARMRAG_URL",
        help="The service's URL (default: http://WARMRAG_HOST:WARMRAG_PORT).",
        show_default=False,
    ),
]


def _client(url: str | None) -> WarmragClient:
    settings = Settings()
    token = settings.admin_token.get_secret_value() if settings.admin_token else None
    return WarmragClient(
        url or f"http://{settings.host}:{settings.port}",
        admin_token=token,
        api_key=os.environ.get("WARMRAG_API_KEY") or None,
    )


EmbeddedOption = Annotated[
    bool,
    typer.Option(
        "--embedded",
        help="Write the data folder (WARMRAG_DATA_DIR) here, with no service running: for "
        "loading documents before the first start. The next start re-checks the warm "
        "prefixes against them.",
    ),
]


def _documents_target(url: str | None, embedded: bool) -> WarmragClient | EmbeddedService:
    """Where ``ingest`` and ``delete`` write: the service at ``url``, or the stores here."""
    if not embedded:
        return _client(url)
    if url:
        raise _fail("--embedded writes the data folder here; it takes no --url", 2)
    from api.embedded import EmbeddedService

    return EmbeddedService(Settings())


def _fail(message: str, code: int = 1) -> typer.Exit:
    _err().print(f"[red]error:[/red] {message}", soft_wrap=True)
    return typer.Exit(code)


@app.command()
def serve() -> None:
    """Run the service (settings from WARMRAG_* variables)."""
    import uvicorn

    from api.main import create_app

    settings = Settings()
    configure_logging(settings.log_format)
    # log_config=None: uvicorn's loggers propagate to the root handler configured above.
    uvicorn.run(
        create_app(settings, freeze_heap=True),
        host=settings.host,
        port=settings.port,
        log_level="info",
        log_config=None,
    )


# ----- ingest ---------------------------------------------------------------------------


@app.command()
def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help=f"Files or folders (searched recursively for {', '.join(SUPPORTED_SUFFIXES)})."
        ),
    ],
    url: UrlOption = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Documents per request.")] = 32,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Read and check every file; send nothing.")
    ] = False,
    keep_going: Annotated[
        bool,
        typer.Option("--keep-going", help="Send the valid files even when some are invalid."),
    ] = False,
    embedded: EmbeddedOption = False,
) -> None:
    """Send documents to the service.

    A file's document id is its path below the folder given (a file given alone: its
    name). Every file is read and checked first: an invalid one stops the run before
    anything is sent, unless --keep-going."""
    try:
        sources = read_sources(paths)
    except DocumentFileError as exc:
        raise _fail(str(exc), 2) from None
    tally = IngestTally(sources)
    invalid = [s for s in sources if s.error]
    for source in invalid:
        _err().print(f"invalid: {source.error}", soft_wrap=True, markup=False)
    if dry_run or (invalid and not keep_going):
        _out().print(tally.table("would send" if not invalid or keep_going else "not sent"))
        if invalid:
            raise _fail(f"{len(invalid)} of {len(sources)} files are invalid; nothing was sent", 2)
        return
    docs = [d for s in sources for d in s.documents]
    failed: str | None = None
    target = _documents_target(url, embedded)
    with (
        _opened(target) as client,
        Progress(
            TextColumn("ingest"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=_err(),
        ) as bar,
    ):
        task = bar.add_task("ingest", total=len(docs))
        for start in range(0, len(docs), batch_size):
            batch = docs[start : start + batch_size]
            try:
                tally.add(client.ingest(batch))
            except ServiceError as exc:
                failed = str(exc)
                tally.fail(batch, failed)
                break
            bar.advance(task, len(batch))
    _out().print(tally.table())
    _out().print(tally.totals())
    if failed:
        raise _fail(failed)
    if invalid:
        raise _fail(f"{len(invalid)} of {len(sources)} files are invalid and were not sent")


@contextmanager
def _opened(
    target: WarmragClient | EmbeddedService,
) -> Iterator[WarmragClient | EmbeddedService]:
    """``target`` entered; a failure to open it (the data folder in use) ends the command."""
    try:
        opened = target.__enter__()
    except ServiceError as exc:
        raise _fail(str(exc)) from None
    try:
        yield opened
    finally:
        target.__exit__(None, None, None)


# ----- other admin commands ---------------------------------------------------------------


@app.command()
def delete(
    ids: Annotated[list[str], typer.Argument(help="Document ids, as `documents` lists them.")],
    url: UrlOption = None,
    embedded: EmbeddedOption = False,
) -> None:
    """Delete documents (their chunks, triples and warm prefixes with them)."""
    out = _out()
    table = Table("document", "outcome", title="delete")
    missing = 0
    with _opened(_documents_target(url, embedded)) as client:
        for doc_id in ids:
            try:
                result = client.delete(doc_id)
            except ServiceError as exc:
                out.print(table)  # what was deleted before the failure
                raise _fail(str(exc)) from None
            if result is None:
                missing += 1
                table.add_row(doc_id, "[red]no such document[/red]")
            else:
                table.add_row(doc_id, f"deleted ({result.removed_chunks} chunks)")
    out.print(table)
    if missing:
        raise _fail(f"{missing} of {len(ids)} documents were not found")


@app.command()
def warm(url: UrlOption = None) -> None:
    """Run a warmup cycle now: what was warmed, extended and retired."""
    out = _out()
    with _client(url) as client:
        try:
            reports = client.warm()
        except ServiceError as exc:
            raise _fail(str(exc)) from None
    table = Table("cycle", "checked", "warmed", "extended", "retired", "prefill tokens", "ms")
    for r in reports:
        table.add_row(
            r.kind.value,
            str(r.entries_checked),
            str(r.rewarmed),
            str(r.extended),
            str(r.retired),
            str(r.prefill_tokens),
            f"{r.total_ms:.0f}",
        )
    out.print(table)


@app.command()
def status(url: UrlOption = None) -> None:
    """Readiness, knowledge base, warm registry, hit rate and the next scheduled jobs."""
    out = _out()
    with _client(url) as client:
        try:
            ready = client.ready()
            hit_ratio = client.metric("warmrag_warmup_hit_ratio")
            registry = client.registry() if client.admin_token else None
        except ServiceError as exc:
            raise _fail(str(exc)) from None
    state = "[green]ready[/green]" if ready.ready else f"[yellow]{ready.phase}[/yellow]"
    out.print(f"service    {state}" + (f" ({ready.detail})" if ready.detail else ""))
    extra = ready.extra
    out.print(f"documents  {extra.documents} (version {extra.kb_version})")
    out.print(f"hit rate   {'-' if hit_ratio is None else f'{hit_ratio:.0%}'} of chats since start")
    if registry is None:
        out.print("registry   (set WARMRAG_ADMIN_TOKEN to see it)")
    else:
        budget = f" of {registry.budget.max_tokens}" if registry.budget else ""
        out.print(
            f"registry   {len(registry.entries)} entries, {registry.warm_tokens}{budget} tokens"
            f" warm, {registry.pending_changes} changes pending"
        )
        for job in registry.jobs:
            out.print(f"job        {job.id}: next {job.next_run_time or 'paused'}")
    if not ready.ready:
        raise typer.Exit(1)


def cache_line(cache: CacheInfo, timings: Timings) -> str:
    """Where the answer's prefix came from, in a user's words, and its first token."""
    served = SERVED_LABELS[cache.served]
    if detail := WARM_STATE_DETAILS.get(cache.warm_state):
        served += f" ({detail})"
    return (
        f"cache   {served}: {cache.cached_tokens} of {cache.prompt_tokens} prompt tokens "
        f"cached; first token after {timings.ttft_ms:.0f} ms"
    )


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    url: UrlOption = None,
    top_k: Annotated[int, typer.Option(min=1, max=20, help="Passages to retrieve.")] = 3,
) -> None:
    """Ask a question: the answer streams, then its passages, triples and cache facts."""
    out = _out()
    result: ChatResponse | None = None
    with _client(url) as client:
        try:
            for part in client.ask(question, top_k):
                if isinstance(part, str):
                    out.print(part, end="", markup=False)
                else:
                    result = part
        except ServiceError as exc:
            out.print()
            raise _fail(str(exc)) from None
    out.print()
    assert result is not None  # ask() ends with the result or raises
    table = Table("#", "document", "score", "passage", title="passages")
    for n, passage in enumerate(result.passages, 1):
        text = " ".join(passage.text.split())  # one line per passage
        text = text if len(text) <= 120 else text[:117] + "..."
        table.add_row(str(n), passage.doc_id, f"{passage.score:.3f}", text)
    out.print(table)
    for triple in result.triples:
        out.print("triple  " + " | ".join(triple), markup=False)
    out.print(cache_line(result.cache, result.timings), markup=False)
    if result.finish_reason is FinishReason.REPEAT:
        out.print("note    the answer began to repeat itself and was stopped there")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status (the console script exits with it).
    Typer's standalone mode prints usage errors and always ends in ``SystemExit``."""
    try:
        app(args=list(argv) if argv is not None else None, prog_name="warmrag")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        _err().print(str(exc.code), markup=False)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
