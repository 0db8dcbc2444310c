"""FoundationDB's transaction size: what counts against its limit (10,000,000 bytes).

FoundationDB counts every mutation *and* every conflict range, each with a fixed overhead.
Measured on FoundationDB 7.3.79 by the largest value that still commits under a small
``size_limit`` (``tests/engines/test_fdb_cluster.py`` keeps these true):

==========================================  ===================================
operation                                   bytes counted
==========================================  ===================================
``set(k, v)``, ``add(k, v)``                ``3*len(k) + len(v) + 69``
``set_versionstamped_value(k, v)``          the same (``v`` with its 4-byte offset)
``set_versionstamped_key(k, v)``            ``len(k) + len(v) + 44`` (``k`` with its offset)
``clear(k)``                                ``4*len(k) + 70``
``clear_range(b, e)``                       ``2*(len(b) + len(e)) + 68``
read conflict ``[b, e)`` (a read, or        ``len(b) + len(e) + 24``; a ``get(k)`` is
``add_read_conflict_range``)                ``[k, k + b"\\x00")``: ``2*len(k) + 25``
snapshot reads                              nothing
==========================================  ===================================

The memory and SQLite engines count the same way (every write counted, even a repeated one,
where FoundationDB counts a key written twice once: never kinder), and the plane computes the
size of a transaction before running it, so that nothing it accepts can fail with 2101.
"""

from __future__ import annotations

from typing import Final

MUTATION: Final = 44
"""Overhead of one mutation."""
CONFLICT_RANGE: Final = 24
"""Overhead of one conflict range."""


def set_cost(key: int, value: int) -> int:
    """Bytes counted for ``set``, ``set_versionstamped_value`` and the atomic mutations
    (``add``, ``compare_and_clear``) of these lengths: the
    mutation and its write conflict range ``[k, k + b"\\x00")``."""
    return key + value + MUTATION + key + key + 1 + CONFLICT_RANGE  # + read_cost(key, key + 1)


def clear_cost(key: int) -> int:
    """Bytes counted for ``clear`` of a key of this length (a one-key range clear)."""
    return clear_range_cost(key, key + 1)


def clear_range_cost(begin: int, end: int) -> int:
    """Bytes counted for ``clear_range`` with bounds of these lengths."""
    return 2 * (begin + end) + MUTATION + CONFLICT_RANGE


def versionstamped_key_cost(key: int, value: int) -> int:
    """Bytes counted for ``set_versionstamped_key`` (``key`` with its offset suffix)."""
    return key + value + MUTATION


def read_cost(begin: int, end: int) -> int:
    """Bytes counted for a read conflict range with bounds of these lengths."""
    return begin + end + CONFLICT_RANGE


def get_cost(key: int) -> int:
    """Bytes counted for a non-snapshot ``get`` of a key of this length."""
    return read_cost(key, key + 1)
