"""docs/cli.md's JSON output table is what the tool prints (``tests/cli/json_output.py``)."""

from __future__ import annotations

import pytest

from tests.cli.conftest import Store
from tests.cli.json_output import COMMANDS, documented, run_all, shape


@pytest.mark.slow  # 23 commands, each its own process
def test_every_store_command_prints_the_json_the_doc_gives(store: Store) -> None:
    table = documented()
    assert list(table) == list(COMMANDS)  # every command, in the order they run
    printed = run_all(store)
    wrong = {name: (table[name], got) for name, got in printed.items() if got != table[name]}
    assert not wrong, "\n".join(f"{n}: doc {d!r}, tool {t!r}" for n, (d, t) in wrong.items())


def test_a_shape_shows_keys_nested_objects_and_maps() -> None:
    value = {"ok": True, "rows": [{"a": 1}, {"b": {"c": None}}], "checked": {"cas bodies": 2}}
    assert shape(value) == "{ok, rows: [{a, b: {c}}], checked: {…}}"
    assert shape([1, 2]) == "" and shape({"rows": []}) == "{rows}"
