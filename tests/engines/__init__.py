"""Tests of the transactional key-value engines (a package so tests can import their fakes)."""
