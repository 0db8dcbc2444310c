"""The conformance suite: every case, by its report name, in run order."""

from __future__ import annotations

from collections.abc import Callable

from conformance import cases
from conformance.context import Context
from conformance.fault_matrix import commit_faults_and_crash_points
from conformance.torture.run import crash_torture, server_kills

CASES: dict[str, Callable[[Context], None]] = {
    "case1_cas_put_get_has": cases.cas_put_get_has,
    "case2_journal_append_conflicts": cases.journal_append_conflicts,
    "case3_inbox_concurrent_writers": cases.inbox_concurrent_writers,
    "case4_cursor_and_drain_exactly_once": cases.cursor_and_drain_exactly_once,
    "case5_snapshot_index_and_baseline": cases.snapshot_index_and_baseline,
    "case6_segment_export_restore": cases.segment_export_restore,
    "failure1_object_without_metadata": cases.failure_object_without_metadata,
    "failure2_metadata_without_body": cases.failure_metadata_without_body,
    "determinism2_retries_are_exactly_once": cases.determinism_retries_are_exactly_once,
    "determinism3_drain_order_is_stable": cases.determinism_drain_order_is_stable,
    "app1_application_data_and_transactions": cases.application_data_and_transactions,
    "faults1_commit_faults_and_crash_points": commit_faults_and_crash_points,
    "crash1_sigkill_torture": crash_torture,
    "crash2_server_kills": server_kills,
    "scale1_sparse_worlds": cases.scale_sparse_worlds,
    "scale2_active_worlds_no_starvation": cases.scale_active_worlds_no_starvation,
    "scale3_export_does_not_stall_writes": cases.scale_export_does_not_stall_writes,
}
"""Every case, by its report name, in run order (the scale envelope last: its load would
slow the cases after it). Failure modes 3 (typed head conflict) and 4 (cursor regression
rejected) are checked inside cases 2 and 4; determinism 1 (restore equals full replay)
inside case 6."""
