"""SQLite's failures as the ``OSError`` a full or read-only disk raises elsewhere, so that
the API answers them (507, 503) the same whichever store hit them."""

from __future__ import annotations

import errno
import sqlite3

_AS_ERRNO = {
    sqlite3.SQLITE_FULL: errno.ENOSPC,
    sqlite3.SQLITE_READONLY: errno.EROFS,
    sqlite3.SQLITE_CANTOPEN: errno.EACCES,
    sqlite3.SQLITE_PERM: errno.EACCES,
    sqlite3.SQLITE_IOERR: errno.EIO,
}


def as_os_error(exc: sqlite3.Error) -> OSError:
    """The ``OSError`` with the errno of ``exc``'s primary result code (EIO if none)."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None  # extended codes keep the low byte
    return OSError(_AS_ERRNO.get(primary or -1, errno.EIO), f"SQLite: {exc}")
