"""The wheel installed without extras: the plane, SQLite and the local object store work,
``aosp demo`` and the conformance quick profile run from it, and every optional backend
names the extra that brings it."""

from __future__ import annotations

import json
import shutil
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

from conformance.suite import CASES
from tests.packaging.conftest import Dist, Env

PACKAGES = (
    "persistence",
    "backends",
    "segments",
    "conformance",
    "spark_connectors",
    "aosp",
    "aos_eventsourcing",
)


TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


def _compiler() -> bool:
    """Whether the C compiler that builds extensions here is present."""
    return shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is not None


def test_the_wheel_and_sdist_hold_every_package_typed(dist: Dist) -> None:
    names = zipfile.ZipFile(dist.wheel).namelist()
    for package in PACKAGES:
        assert f"{package}/__init__.py" in names
        assert f"{package}/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "aos_bench/", "aosp/benchmarks/"))]
    # the C wake-up of FoundationDB futures and the CRC-32C of journal entries, built
    # where a C compiler is; the second uses CPython's own API, so the wheel is tagged for
    # this CPython version (on this platform)
    assert f"-{TAG}-{TAG}-" in dist.wheel.name
    assert ("backends/kv/_fdb_wake.abi3.so" in names) is _compiler()
    checksums = f"persistence/protocols/_checksums{sysconfig.get_config_var('EXT_SUFFIX')}"
    assert (checksums in names) is _compiler()
    with tarfile.open(dist.sdist) as sdist:
        members = sdist.getnames()
    assert any(m.endswith("/persistence/plane/__init__.py") for m in members)
    assert any(m.endswith("/backends/kv/_fdb_wake.c") for m in members)
    assert any(m.endswith("/persistence/protocols/_checksums.c") for m in members)
    assert any(m.endswith("/pyproject.toml") for m in members)


CORE = """
import importlib.util, json, sys, tempfile
from pathlib import Path
import persistence, segments
from backends.kv import fdb_wake
from persistence.protocols import checksums
from segments import open_plane
from persistence.ids import UniverseId, WorldId
d = Path(tempfile.mkdtemp())
plane = open_plane(f"sqlite://{d}/aos.db", f"file://{d}/objects")
u, w = UniverseId.new(), WorldId.new()
plane.create_world(u, w)
plane.append_batch(u, w, 0, [b"entry"])
print(json.dumps({
    "read": [e.decode() for _, e in plane.read_range(u, w, 1, 10)],
    "blob": plane.get(u, plane.put_verified(u, b"x" * 20000)).decode()[:3],
    "from": persistence.__file__,
    "wake": fdb_wake.available(),
    "crc32c_in_c": checksums.IN_C,
    "optional": {m: importlib.util.find_spec(m) is not None
                 for m in ("boto3", "pyarrow", "pyspark", "fdb", "opentelemetry")},
}))
"""


def test_the_core_install_runs_the_plane_on_sqlite_and_local_objects(core_env: Env) -> None:
    done = core_env.run("python", "-c", CORE)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["read"] == ["entry"] and out["blob"] == "xxx"
    assert out["wake"] is _compiler()  # the wheel's C wake-up loads without the fdb extra
    assert out["crc32c_in_c"] is _compiler()
    assert Path(out["from"]).is_relative_to(core_env.path)  # the installed wheel, no checkout
    assert out["optional"] == {
        "boto3": False,
        "pyarrow": False,
        "pyspark": False,
        "fdb": False,
        "opentelemetry": False,
    }


MISSING = """
from backends.kv import open_engine
from backends.objects import open_object_store
from persistence.errors import MissingDependency
for open_, url in ((open_object_store, "s3://bucket/prefix"), (open_engine, "fdb://")):
    try:
        open_(url)
    except MissingDependency as exc:
        print(exc)
try:
    from spark_connectors.session import spark_session
    spark_session()
except MissingDependency as exc:
    print(exc)
try:
    import aos_eventsourcing
except MissingDependency as exc:
    print(exc)
"""


def test_a_missing_extra_is_named_with_its_install_line(core_env: Env) -> None:
    done = core_env.run("python", "-c", MISSING)
    assert done.returncode == 0, done.stderr
    s3, fdb, spark, eventsourcing = done.stdout.strip().splitlines()
    assert "pip install 'aos-persistence[s3]'" in s3
    assert "pip install 'aos-persistence[fdb]'" in fdb
    assert "pip install 'aos-persistence[spark]'" in spark
    assert "pip install 'aos-persistence[eventsourcing]'" in eventsourcing


def test_aosp_bench_without_the_benchmarks_says_how_to_install_them(core_env: Env) -> None:
    """The benchmarks are not in the wheel: ``aosp bench`` is listed, and says where they are."""
    assert "bench" in core_env.run("aosp", "--help").stdout
    done = core_env.run("aosp", "bench", "plane", "--seconds", "1")
    assert done.returncode == 3, done.stderr
    assert "aosp bench is not installed" in done.stderr
    assert "pip install -c constraints.txt -e ./benchmarks" in done.stderr
    done = core_env.run("aosp", "bench", "--seconds", "1", "--fdb", "fdb://", "engine")
    assert done.returncode == 3 and "aosp bench is not installed" in done.stderr, done.stderr


def test_aosp_demo_runs_from_the_wheel(core_env: Env) -> None:
    done = core_env.run(
        "aosp", "demo", "--data-dir", "demo", "--worlds", "4", "--writers", "2", "--items", "60"
    )
    assert done.returncode == 0, done.stderr
    assert "all 4 worlds verified" in done.stdout


def test_the_conformance_quick_profile_runs_from_the_wheel(core_env: Env) -> None:
    workdir = core_env.workdir
    done = core_env.run(
        "aosp",
        "conformance",
        "--kv",
        f"faults+sqlite://{workdir}/conformance.db",
        "--objects",
        f"file://{workdir}/conformance-objects",
        "--report",
        "report",
        "--json",
        "--quiet",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["ok"] is True
    # Every case runs but the server-kill torture, which needs a cluster's processes to kill.
    cases = len(CASES)
    assert (summary["cases"], summary["passed"], summary["skipped"]) == (cases, cases - 1, 1)
    (skipped,) = [r for r in summary["results"] if r["outcome"] == "skipped"]
    assert skipped["name"] == "crash2_server_kills"
