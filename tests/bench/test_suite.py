"""The suite's command line: which sections a run covers."""

from __future__ import annotations

import pytest

from bench.suite import QUICK_SECTIONS, SECTIONS, parse_args


def test_a_full_run_covers_every_section() -> None:
    assert parse_args([]).only.split(",") == list(SECTIONS)


def test_a_quick_run_keeps_to_the_sections_that_share_one_vllm() -> None:
    assert parse_args(["--quick"]).only.split(",") == list(QUICK_SECTIONS)
    everything = ",".join(SECTIONS)
    assert parse_args(["--quick", "--only", everything]).only == everything


def test_an_unknown_section_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--only", "main,presure"])
    assert exit_.value.code == 2
    assert "presure" in capsys.readouterr().err
