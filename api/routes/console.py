"""The web console: one HTML page at ``/`` and its script and style under ``/console``.

Plain HTML, CSS and JavaScript in ``api/console/``, nothing to build and nothing fetched
from elsewhere: the Content-Security-Policy lets the page load and call only this origin.
The page talks to the public API like any client; admin views send the admin token, which
the page keeps in the tab's session storage only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
#: Same-origin only: no inline script, no third-party anything, never framed.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def console() -> FileResponse:
    """The console page (chat, and the admin views once signed in)."""
    return FileResponse(CONSOLE_DIR / "index.html", headers=PAGE_HEADERS)


class _Assets(StaticFiles):
    """Static files that the browser checks again on every load (``no-cache``: a 304
    when unchanged), so an upgraded service never runs with last version's script."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def assets() -> StaticFiles:
    """The console's script and style, served under ``/console``."""
    return _Assets(directory=CONSOLE_DIR, check_dir=False)
