"""Ids for people (issue #37): ``-u``/``-w`` take a unique prefix of an id (dashes and case as
one likes) and ``-w`` a world's handle; a prefix naming several is a usage error listing
them, one naming nothing is not-found naming the option; handles are unique in a
universe; ``world list`` and ``universe list`` show what there is."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path

import pytest

from aosp.cli.ids import resolve_universe, resolve_world
from aosp.fsck import Fsck
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import kv
from persistence.errors import EngineError, HandleTaken, NotFound, Validation, WorldExists
from persistence.futures import drive
from persistence.ids import Hash, UniverseId, WorldId
from persistence.keyspace import LAYOUT_KEY, UniverseKeys, WorldKeys
from persistence.plane import Plane
from persistence.protocols import worlds
from persistence.records import LayoutRecord, SnapshotRecord, WorldMeta
from segments import open_plane
from tests.cli.conftest import Store, aosp


def _universe(text: str) -> UniverseId:
    return UniverseId(uuid.UUID(text))


def test_a_prefix_names_the_one_universe_it_starts(store: Store) -> None:
    u = store.universe
    for prefix in (u[:8], u[:8].upper(), u[:13], u.replace("-", "")[:12]):
        result = aosp("inspect", *store.args("-u", prefix, "-w", store.world, "--json"))
        assert result.code == 0, (prefix, result.err)
        assert result.json()["universe"] == u


def test_a_world_is_named_by_a_prefix_or_its_handle(store: Store) -> None:
    listed = aosp("world", "list", *store.args("-u", store.universe[:6], "--json")).json()
    mine = next(w for w in listed["worlds"] if w["world"] == store.world)
    assert mine["handle"].startswith("demo-")
    for name in (store.world[:8], mine["handle"]):
        result = aosp("inspect", *store.args("-u", store.universe[:8], "-w", name, "--json"))
        assert result.code == 0, result.err
        assert result.json()["world"] == store.world


def test_prefixes_that_name_several_or_nothing_are_refused_naming_the_option() -> None:
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    first, second = (_universe(f"abcd{n}000-0000-4000-8000-000000000000") for n in (1, 2))
    for universe in (first, second):
        plane.create_world(universe, WorldId.new())
    with pytest.raises(Validation, match=r"--universe: 'abcd' names .*abcd1000.*abcd2000"):
        resolve_universe(plane, "abcd")
    assert resolve_universe(plane, "ABCD-1") == first
    with pytest.raises(NotFound, match="--universe ffff: names nothing"):
        resolve_universe(plane, "ffff")
    with pytest.raises(Validation, match="4 to 31 hex digits"):
        resolve_universe(plane, "abc")
    with pytest.raises(NotFound, match="--world nosuch: names nothing in universe"):
        resolve_world(plane, first, "nosuch")


def test_an_exact_handle_wins_over_a_prefix_of_another_world() -> None:
    """A handle cannot be an id, so a text that is one world's handle names it, whatever
    other world's id starts with the same digits; a prefix naming several lists them."""
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    universe = UniverseId.new()
    for n in (1, 2):
        plane.create_world(universe, WorldId(uuid.UUID(f"beef{n}000-0000-4000-8000-000000000000")))
    plane.create_world(universe, mine := WorldId.new(), handle="beef")
    assert resolve_world(plane, universe, "beef") == mine
    with pytest.raises(Validation, match=r"'beef-' names .*beef1000.*beef2000"):
        resolve_world(plane, universe, "beef-")
    assert resolve_world(plane, universe, "BEEF1") == WorldId.parse(
        "beef1000-0000-4000-8000-000000000000"
    )


@pytest.mark.parametrize(
    "handle",
    ["beef1000-0000-4000-8000-000000000000", "BEEF1000000040008000000000000000", "a\tb"],
    ids=["canonical-id", "hex-id", "tab"],
)
def test_a_handle_is_printable_and_not_an_id(handle: str) -> None:
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    with pytest.raises(Validation, match="handle"):
        plane.create_world(UniverseId.new(), WorldId.new(), handle=handle)


def test_a_prefix_or_handle_given_for_a_store_not_yet_there_creates_nothing(
    tmp_path: Path,
) -> None:
    """``world create -u abcd`` (or ``cas put``) where there is no store: the prefix names
    nothing, and no store is left behind (it was created, then the command failed)."""
    body = tmp_path / "body"
    body.write_bytes(b"x")
    for command in (["world", "create", "-u", "abcd"], ["cas", "put", "-u", "abcd", str(body)]):
        result = aosp(*command, cwd=tmp_path)
        assert result.code == 3 and "--universe abcd: names nothing" in result.err, result.err
        assert not (tmp_path / "aosp-data").exists() or not any((tmp_path / "aosp-data").iterdir())


def test_a_full_id_is_taken_without_reading_the_store() -> None:
    """``world create -u <new id>`` makes the universe: a full id needs nothing stored."""
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    new = UniverseId.new()
    assert resolve_universe(plane, str(new)) == new


def test_a_handle_is_unique_in_its_universe(plane_with_world: tuple[Plane, UniverseId]) -> None:
    plane, universe = plane_with_world
    first = plane.world_of_handle(universe, "shop")
    assert first is not None
    with pytest.raises(HandleTaken, match=str(first)) as err:
        plane.create_world(universe, second := WorldId.new(), handle="shop")
    assert not isinstance(err.value, WorldExists) and err.value.world == str(first)
    again = pickle.loads(pickle.dumps(err.value))
    assert type(again) is HandleTaken and str(again) == str(err.value)
    with pytest.raises(NotFound):
        plane.world_meta(universe, second)  # nothing of it was written
    elsewhere = UniverseId.new()
    plane.create_world(elsewhere, third := WorldId.new(), handle="shop")
    assert plane.world_of_handle(elsewhere, "shop") == third
    assert plane.world_of_handle(universe, "shop") == first
    assert plane.world_of_handle(universe, "other") is None


@pytest.fixture
def plane_with_world() -> tuple[Plane, UniverseId]:
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    universe = UniverseId.new()
    plane.create_world(universe, WorldId.new(), handle="shop")
    return plane, universe


def test_two_creations_racing_for_one_handle_leave_one_world(
    plane_with_world: tuple[Plane, UniverseId],
) -> None:
    """Both read the handle absent in their transactions; the second to commit conflicts
    on it, and its retry finds the handle taken."""
    plane, _ = plane_with_world
    universe = UniverseId.new()
    genesis: SnapshotRecord = plane.create_world(universe, WorldId.new())
    racing = [WorldKeys(universe, WorldId.new()) for _ in range(2)]
    meta = WorldMeta(created_ns=1, handle="raced")
    first, second = (plane.engine.create_transaction() for _ in racing)
    assert drive(worlds.create_world(first, racing[0], meta, genesis))
    assert drive(worlds.create_world(second, racing[1], meta, genesis))
    first.commit().wait()
    with pytest.raises(EngineError) as conflict:
        second.commit().wait()
    assert conflict.value.code == 1020
    with pytest.raises(HandleTaken, match=str(racing[0].world)):
        kv.run(plane.engine, lambda tr: worlds.create_world(tr, racing[1], meta, genesis))
    raw = kv.run(plane.engine, lambda tr: tr.get(UniverseKeys(universe).handle("raced")))
    assert raw == racing[0].world.uuid.bytes


def test_world_create_with_a_taken_handle_is_a_conflict_naming_the_world(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    made = aosp("world", "create", "--data-dir", data, "--handle", "my-shop", "--json").json()
    again = aosp(
        "world", "create", "--data-dir", data, "-u", made["universe"], "--handle", "my-shop"
    )
    assert again.code == 4 and made["world"] in again.err and "my-shop" in again.err
    other = aosp("world", "create", "--data-dir", data, "--handle", "my-shop")
    assert other.code == 0, other.err  # another (new) universe
    listed = aosp("world", "list", "--data-dir", data, "--handle", "my", "--json").json()
    assert sorted(w["handle"] for w in listed["worlds"]) == ["my-shop", "my-shop"]
    assert listed["more"] is False


def test_the_lists_say_when_there_is_more(store: Store) -> None:
    one = aosp("world", "list", *store.args("--limit", "1"))
    assert one.code == 0 and "more worlds" in one.text and "raise --limit" in one.text
    rows = aosp("world", "list", *store.args("--json")).json()["worlds"]
    assert len(rows) == 3 and all(r["head"] > 0 and r["created"].endswith("Z") for r in rows)
    universes = aosp("universe", "list", *store.args("--json")).json()
    assert universes == {
        "universes": [{"universe": store.universe, "worlds": 3, "worlds_more": False}],
        "more": False,
    }
    text = aosp("universe", "list", *store.args()).text
    assert store.universe[:8] in text and store.universe not in text  # short ids for people


def test_fsck_checks_the_index_of_handles(plane_with_world: tuple[Plane, UniverseId]) -> None:
    """Each entry names a world whose meta has that handle: one pointed at another world,
    or at none, is an error finding."""
    plane, universe = plane_with_world
    other = WorldId.new()
    plane.create_world(universe, other, handle="other")
    report = Fsck(plane).run()
    assert report.ok and report.checked["handles"] == 2
    key = UniverseKeys(universe).handle("shop")
    kv.run_sync(plane.engine, lambda tr: tr.set(key, other.uuid.bytes))
    kv.run_sync(plane.engine, lambda tr: tr.set(UniverseKeys(universe).handle("gone"), b"x" * 16))
    found = {(f.subject, f.world): f.message for f in Fsck(plane).run().errors}
    assert "whose handle is 'other'" in found["handle 'shop'", str(other)]
    assert any(subject.startswith("handle ") and world is None for subject, world in found)


def test_fsck_counts_unindexed_handles_and_warns_of_shared_ones() -> None:
    """Worlds of a store written before the index have no entry (counted, and ``-w``
    finds them by their metas in a layout-2 store); a world sharing its handle with the
    indexed one is a warning naming both."""
    engine = MemoryEngine()
    kv.run_sync(engine, lambda tr: tr.set(LAYOUT_KEY, LayoutRecord(2).to_cbor()))
    plane = open_plane(engine, MemoryObjectStore())
    universe, old, new = UniverseId.new(), WorldId.new(), WorldId.new()
    legacy = WorldId.new()
    for world, handle in ((old, "shop"), (legacy, "legacy")):
        plane.create_world(universe, world, handle=handle)
        _clear(engine, UniverseKeys(universe).handle(handle))  # as a release before it wrote
    assert resolve_world(plane, universe, "shop") == old  # found in the metas
    plane.create_world(universe, new, handle="shop")  # the index did not know the old one
    report = Fsck(plane).run()
    assert report.checked["handles not indexed (worlds created before the index)"] == 1
    assert [(f.world, f.subject) for f in report.warnings] == [(str(old), "handle 'shop'")]
    assert str(new) in report.warnings[0].message
    assert resolve_world(plane, universe, "shop") == new


def test_world_list_by_handle_reads_the_index(store: Store) -> None:
    rows = aosp("world", "list", *store.args("--handle", "demo-", "--json")).json()["worlds"]
    assert sorted(r["handle"] for r in rows) == ["demo-1", "demo-2", "demo-3"]
    assert aosp("world", "list", *store.args("--handle", "nope", "--json")).json() == {
        "worlds": [],
        "more": False,
    }


def test_a_hash_is_named_by_a_prefix_in_its_universe(store: Store, tmp_path: Path) -> None:
    body = tmp_path / "body"
    body.write_bytes(b"a body named by a prefix")
    digest = aosp("cas", "put", *store.args("-u", store.universe[:8], str(body))).text.strip()
    for prefix in (digest[:6], digest[:7].upper()):
        got = aosp("cas", "get", *store.args("-u", store.universe[:8], prefix))
        assert got.code == 0 and got.out == b"a body named by a prefix", got.err
    stat = aosp("cas", "stat", *store.args("-u", store.universe, digest[:9], "--json")).json()
    assert stat["hash"] == digest
    missing = "0000" if not digest.startswith("0000") else "ffff"
    fails_with = aosp("cas", "stat", *store.args("-u", store.universe, missing))
    assert fails_with.code == 3 and "names nothing in the CAS of universe" in fails_with.err
    assert aosp("cas", "stat", *store.args("-u", store.universe, "xyz1")).code == 2


def test_the_key_range_of_a_digest_prefix_holds_every_digest_that_starts_with_it() -> None:
    """A digest whose next byte is 0xff or 0x00 (escaped in the key) is in the prefix's
    range too; one that does not start with it is not."""
    keys = UniverseKeys(UniverseId.new())
    begin, end = keys.cas_metas_from(b"\xab")
    for second in (0x00, 0x01, 0x7F, 0xFE, 0xFF):
        for rest in (b"\x00" * 30, b"\xff" * 30):
            assert begin <= keys.cas_meta(Hash(bytes([0xAB, second]) + rest)) < end
    for other in (b"\xaa" + b"\xff" * 31, b"\xac" + b"\x00" * 31):
        assert not begin <= keys.cas_meta(Hash(other)) < end
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    universe = UniverseId.new()
    stored = [plane.put_verified(universe, b"body %d" % n) for n in range(100)]
    prefix = stored[0].digest[:1]
    expected = sorted(h.hex for h in stored if h.digest.startswith(prefix))
    assert [h.hex for h in plane.hashes_from(universe, prefix, 1_000)] == expected


def test_a_store_created_by_a_writing_command_is_said_on_stderr(tmp_path: Path) -> None:
    """``cas put`` from a directory without a store (issue #37: it created ./aosp-data
    silently, and fsck there reported 0 errors): the one line says where; the next put into
    the same store says nothing of it, and a reading command creates nothing."""
    body = tmp_path / "small.txt"
    body.write_bytes(b"small")
    universe = str(UniverseId.new())
    first = aosp("cas", "put", "-u", universe, str(body), cwd=tmp_path)
    assert first.code == 0 and "aosp: created a new store in aosp-data" in first.err
    again = aosp("cas", "put", "-u", universe, str(body), cwd=tmp_path)
    assert again.code == 0 and "created" not in again.err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert aosp("fsck", cwd=elsewhere).code == 3 and list(elsewhere.iterdir()) == []


def _clear(engine: kv.Engine, key: bytes) -> None:
    kv.run_sync(engine, lambda tr: tr.clear(key))
