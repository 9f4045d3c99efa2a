"""Chromium for the console's browser tests: Debian's ``chromium``, found on the PATH or
installed by the test set-up.

When the session has a browser test, ``CHROMIUM.start()`` (from ``conftest``) installs it
with ``apt-get`` in a thread, so the install runs while the session's vLLM server starts;
the tests' fixture waits for it. Where it cannot be installed (not root, no apt, no
network) the browser tests are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from bench.apt import AptInstallError, apt_install

PACKAGE = "chromium"
NAMES = ("chromium", "chromium-browser")
#: It took 19 s here (332 MB); past this the browser tests are skipped, not failed.
INSTALL_TIMEOUT_S = 300.0


def find_chromium() -> Path | None:
    for name in NAMES:
        if found := shutil.which(name):
            return Path(found)
    return None


class ChromiumSetup:
    """Finds or installs Chromium once per test session."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._path: Path | None = None
        self._problem = "the browser set-up never ran"

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._install, name="chromium", daemon=True)
            self._thread.start()

    def _install(self) -> None:
        if (found := find_chromium()) is not None:
            self._path = found
            return
        if os.geteuid() != 0:
            self._problem = f"Chromium is missing, and only root may `apt-get install {PACKAGE}`"
            return
        try:
            apt_install(PACKAGE)
        except AptInstallError as exc:
            self._problem = f"Chromium could not be installed: {exc}"
            return
        self._path = find_chromium()
        if self._path is None:
            self._problem = f"the {PACKAGE} package is installed but no chromium is on the PATH"

    def wait(self, timeout_s: float = INSTALL_TIMEOUT_S) -> tuple[Path | None, str]:
        """The browser's path, or None and why there is none."""
        self.start()
        assert self._thread is not None
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            return None, f"installing Chromium took over {timeout_s:.0f} s (a slow network?)"
        return self._path, self._problem


CHROMIUM = ChromiumSetup()
