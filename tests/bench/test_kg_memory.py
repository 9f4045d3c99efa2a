"""``bench.kg_memory`` on a small graph: the measurement runs in a fresh process and
reports each stage (it is what the RSS-at-1M miss is measured with)."""

from __future__ import annotations

from bench.kg_memory import run
from bench.scale_folder import GRAPH_PER_CHUNK


def test_a_small_graph_is_loaded_prepared_and_changed_in_a_child() -> None:
    measured = run(chunks=300, changes=2, queries=5)
    per_chunk, _ = GRAPH_PER_CHUNK
    assert 0.8 * per_chunk * 300 < measured.triples < 1.2 * per_chunk * 300
    assert measured.entities > 0 and len(measured.change_s) == 2
    assert measured.load_s > 0 and measured.prepare_s >= 0
    assert measured.peak_mib >= max(measured.loaded_mib, measured.prepared_mib) > 0
    # The vectors read back are mapped from the snapshot's files: part of the RSS only.
    assert measured.from_snapshot and measured.mapped_at_load
    # Each is a difference of two readings rounded to whole MiB: up to 2 MiB apart by
    # rounding alone (a small graph's load adds 4-5 MiB; 5 against 4 failed once).
    assert measured.loaded_anon_mib <= measured.loaded_mib + 2
    assert measured.queries == 5 and measured.select_p99_ms >= measured.select_p50_ms > 0
    # The entity link from the codes and from the float32 scan chose the same entities.
    assert measured.link_p50_ms > 0 and measured.link_scan_p50_ms > 0
    assert measured.link_candidates_max >= 1  # each question is near its own subject
    assert measured.link_recall == 1.0  # no cells at this size: the choice is exact
    # The selections with rows read from the file and through the mapping chose alike.
    assert measured.select_file_p50_ms > 0 and measured.select_mapped_p50_ms > 0


def test_after_a_crash_the_load_reads_the_rows_and_streams_the_vectors_to_files() -> None:
    measured = run(chunks=100, changes=1, queries=2, after_crash=True)
    assert not measured.from_snapshot and measured.entities > 0
    assert measured.mapped_at_load  # kg.row_files.read_rows
    assert measured.select_file_p50_ms > 0
