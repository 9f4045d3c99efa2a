"""Installing a Debian package the benchmark (or the test set-up) needs, as root."""

from __future__ import annotations

import subprocess


class AptInstallError(RuntimeError):
    """``apt-get install`` failed; the message ends with its output's tail."""


def apt_install(package: str) -> None:
    """``apt-get install -y --no-install-recommends PACKAGE``, after ``apt-get update``
    when the first try fails (a fresh machine has no package lists yet)."""
    # A mirror that stops answering fails in seconds, not apt's default two minutes.
    options = ["-o", "Acquire::http::Timeout=30", "-o", "Acquire::Retries=1"]
    install = ["apt-get", *options, "install", "-y", "--no-install-recommends", package]
    try:
        if subprocess.run(install, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", *options, "update"], check=True, capture_output=True)
            subprocess.run(install, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = (getattr(exc, "stderr", b"") or b"").decode(errors="replace")[-500:]
        raise AptInstallError(f"`apt-get install -y {package}` failed: {exc} {detail}") from exc
