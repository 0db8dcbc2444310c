"""Operator mistakes through a real ``aosp`` subprocess: each is exit 2 (usage) or 3 (what is
named is missing or unusable), one line on stderr (``aosp: <kind> error: ...``), and
creates nothing -- never a new, empty store that then reports "0 errors"."""

from __future__ import annotations

import http.server
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from backends.kv.sqlite import SqliteEngine
from persistence.errors import Validation
from persistence.keyspace import LAYOUT_KEY
from segments import open_plane
from tests.cli.conftest import ROOT, Result, aosp
from tests.fdb_cluster import FdbCluster

UNIVERSE = "3f1b1c9e-2d7a-4c55-9a52-7c1e2f3a4b5c"
WORLD = "0c6d4e2f-8a1b-4d3c-b5e6-f708192a3b4c"
HASH = "ab" * 32
MISSING = "9e8d7c6b-5a49-4838-a726-15f4e3d2c1b0"
"""An id nothing in any test store has (a mistyped ``-u`` or ``-w``)."""


def listing(root: Path) -> list[str]:
    """Every path under ``root``, relative, sorted (the "nothing created" witness)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def fails(result: Result, code: int, kind: str, *words: str) -> None:
    """``result`` exited with ``code`` and said so in one ``aosp: <kind> error`` line."""
    line = result.one_line_error()
    assert result.code == code, result.err
    assert line.startswith(f"aosp: {kind} error: "), line
    for word in words:
        assert word in line, line


@dataclass
class Made:
    """A store made by ``world create`` with one world and one blob."""

    data_dir: Path
    universe: str
    world: str
    blob: str

    def args(self, *more: str) -> list[str]:
        return ["--data-dir", str(self.data_dir), *more]

    def world_args(self, *more: str) -> list[str]:
        return self.args("-u", self.universe, "-w", self.world, *more)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    data = tmp_path_factory.mktemp("made") / "data"
    created = aosp("world", "create", "--data-dir", str(data), "--json").json()
    put = aosp("cas", "put", "--data-dir", str(data), "-u", created["universe"], "-", stdin=b"hi")
    assert put.code == 0, put.err
    return Made(data, created["universe"], created["world"], put.text.strip())


# --------------------------------------------------------------------------- no store, no creation

READING_COMMANDS = [
    ["inspect"],
    ["fsck"],
    ["segments", "list"],
    ["segments", "verify"],
    ["restore", "verify"],
    ["journal", "read", "-u", UNIVERSE, "-w", WORLD],
    ["inbox", "read", "-u", UNIVERSE, "-w", WORLD],
    ["snapshot", "list", "-u", UNIVERSE, "-w", WORLD],
    ["cas", "get", "-u", UNIVERSE, HASH],
]


@pytest.mark.parametrize("command", READING_COMMANDS, ids=" ".join)
def test_reading_commands_never_create_a_store_from_mistyped_urls(
    command: list[str], tmp_path: Path
) -> None:
    urls = ["--kv", f"sqlite://{tmp_path}/typo.db", "--objects", f"file://{tmp_path}/typo"]
    result = aosp(*command, *urls)
    fails(result, 3, "not_found", "--kv", "typo.db", "no such database")
    assert listing(tmp_path) == []


def test_a_mistyped_objects_url_is_not_found_not_a_new_directory(
    made: Made, tmp_path: Path
) -> None:
    urls = ["--kv", f"sqlite://{made.data_dir}/aos.db", "--objects", f"file://{tmp_path}/typo"]
    fails(aosp("fsck", *urls), 3, "not_found", "--objects", "no object store")
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    "objects", ["s3://", "foo://x", "file:///dev/null"], ids=["no bucket", "scheme", "a file"]
)
def test_a_command_refused_for_its_objects_url_creates_no_database(
    tmp_path: Path, objects: str
) -> None:
    """Both URLs are checked, and the existing stores opened, before anything is created."""
    result = aosp("world", "create", "--kv", f"sqlite://{tmp_path}/new.db", "--objects", objects)
    assert result.code in (2, 3), result.err
    assert "--objects" in result.one_line_error()
    assert listing(tmp_path) == []


@pytest.mark.parametrize("command", [["fsck"], ["inspect"]], ids=" ".join)
def test_reading_commands_write_nothing_into_a_store_without_its_layout_record(
    command: list[str], tmp_path: Path
) -> None:
    """A store whose layout row was deleted is damage to report (once quietly rewritten by
    the plane's opening, after which fsck said "0 errors"); a store an engine alone created
    (no plane ever opened it) stays as it is. Neither file changes, no file appears."""
    data = tmp_path / "data"
    assert aosp("world", "create", "--data-dir", str(data)).code == 0
    raw = sqlite3.connect(data / "aos.db")
    raw.execute("DELETE FROM kv WHERE key = ?", (LAYOUT_KEY,))
    raw.commit()
    raw.close()
    SqliteEngine(tmp_path / "empty.db").close()
    before = {p: p.read_bytes() for p in (data / "aos.db", tmp_path / "empty.db")}
    files = listing(tmp_path)
    fails(aosp(*command, "--data-dir", str(data)), 3, "backend", "no layout record")
    aosp(*command, "--kv", f"sqlite://{tmp_path}/empty.db", "--objects", f"file://{data}/objects")
    assert {p: p.read_bytes() for p in before} == before
    assert listing(tmp_path) == files


def test_memory_urls_name_no_store_to_read() -> None:
    result = aosp("inspect", "--kv", "memory://", "--objects", "memory://")
    fails(result, 3, "not_found", "--kv", "new, empty store")


@pytest.mark.parametrize("command", [["inspect"], ["fsck"]], ids=" ".join)
def test_a_zero_byte_database_is_refused_and_left_alone(command: list[str], tmp_path: Path) -> None:
    (tmp_path / "aos.db").touch()
    fails(aosp(*command, "--data-dir", str(tmp_path)), 3, "backend", "empty file (0 bytes)")
    assert listing(tmp_path) == ["aos.db"] and (tmp_path / "aos.db").stat().st_size == 0


@pytest.mark.parametrize("how", ["data-dir", "kv"])
@pytest.mark.parametrize("command", [["world", "create"], ["cas", "put", "-u", UNIVERSE, "-"]])
def test_commands_that_create_refuse_a_zero_byte_database_too(
    command: list[str], how: str, tmp_path: Path
) -> None:
    """A 0-byte ``aos.db`` is damage (a store truncated to nothing), not a store to start
    afresh: ``world create`` used to initialise it silently."""
    (tmp_path / "aos.db").touch()
    if how == "data-dir":
        where, option = ["--data-dir", str(tmp_path)], "--data-dir"
    else:
        objects = f"file://{tmp_path}/objects"
        where, option = ["--kv", f"sqlite://{tmp_path}/aos.db", "--objects", objects], "--kv"
    result = aosp(*command, *where, stdin=b"body")
    fails(result, 3, "backend", option, "empty file (0 bytes)")
    assert listing(tmp_path) == ["aos.db"] and (tmp_path / "aos.db").stat().st_size == 0


# --------------------------------------------------------------- a universe or world not there

SELECTING_COMMANDS = [
    ["fsck"],
    ["inspect"],
    ["restore", "verify"],
    ["segments", "verify"],
    ["segments", "list"],
    ["segments", "plan"],
    ["segments", "export"],
    ["compact"],
    ["compact", "--orphans"],
    ["drain"],
    ["drain", "--follow"],
    ["spark", "replay-check"],
    ["spark", "analytics"],
]


@pytest.mark.parametrize("command", SELECTING_COMMANDS, ids=" ".join)
def test_a_mistyped_universe_is_not_found_not_a_pass(
    command: list[str], made: Made, tmp_path: Path
) -> None:
    """``fsck -u <typo>`` used to print "0 errors", ``restore verify`` "0/0 worlds" and
    ``segments verify`` "0/0 segments verified", all exit 0."""
    before = listing(made.data_dir)
    result = aosp(*command, *made.args("-u", MISSING, "--quiet"), cwd=tmp_path)
    fails(result, 3, "not_found", "--universe", MISSING)
    assert listing(made.data_dir) == before and listing(tmp_path) == []  # (analytics' output)


@pytest.mark.parametrize(
    "command",
    [
        ["inspect"],
        ["restore", "verify"],
        ["segments", "verify"],
        ["journal", "read"],
        ["inbox", "read"],
        ["snapshot", "list"],
        ["spark", "replay-check"],
    ],
    ids=" ".join,
)
def test_a_mistyped_world_is_named_with_its_options(command: list[str], made: Made) -> None:
    result = aosp(*command, *made.args("-u", made.universe, "-w", MISSING, "--quiet"))
    fails(result, 3, "not_found", f"--world {MISSING}", f"--universe {made.universe}")


def test_a_universe_of_cas_bodies_alone_is_checked_not_refused(tmp_path: Path) -> None:
    """A universe with CAS bodies and no world exists (``cas put`` makes one): fsck checks
    it and ``compact --orphans`` collects in it; what needs worlds says it has none."""
    data = ["--data-dir", str(tmp_path / "data")]
    assert aosp("world", "create", *data).code == 0
    assert aosp("cas", "put", *data, "-u", UNIVERSE, "-", stdin=b"body").code == 0
    checked = aosp("fsck", *data, "-u", UNIVERSE, "--json", "--quiet")
    assert checked.code == 0, checked.err
    assert checked.json()["ok"] is True and checked.json()["checked"]["cas bodies"] == 1
    dry = aosp("compact", *data, "-u", UNIVERSE, "--orphans", "--dry-run", "--json")
    assert dry.code == 0 and dry.json()["worlds"] == [], dry.err
    refused = aosp("restore", "verify", *data, "-u", UNIVERSE)
    fails(refused, 3, "not_found", "--universe", UNIVERSE, "no world")


@pytest.fixture
def empty_store(tmp_path: Path) -> Path:
    """A store of ours without any universe (made by the library; no command makes one)."""
    data = tmp_path / "empty"
    data.mkdir()
    open_plane(f"sqlite://{data}/aos.db", f"file://{data}/objects", create=True).engine.close()
    return data


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["fsck"], "the store has no universes: nothing was checked"),
        (["restore", "verify"], "the store has no worlds: nothing was verified"),
        (["segments", "verify"], "the store has no worlds: nothing was verified"),
        (["spark", "replay-check"], "the store has no worlds: nothing was verified"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_a_check_that_checked_nothing_does_not_pass(
    command: list[str], says: str, empty_store: Path
) -> None:
    """A store without worlds: nothing ran, so exit 1 and ``"ok": false`` with the
    ``reason`` the text gives, never a clean "0 errors" or "0/0 worlds"."""
    before = listing(empty_store)
    text = aosp(*command, "--data-dir", str(empty_store), "--quiet")
    assert text.code == 1 and says in text.text and text.err == "", (text.text, text.err)
    as_json = aosp(*command, "--data-dir", str(empty_store), "--quiet", "--json")
    assert as_json.code == 1, as_json.err
    out = as_json.json()
    assert out["ok"] is False and out["reason"] == says
    if command == ["fsck"]:
        assert out["ok"] is False and out["errors"] == 0
    elif command == ["segments", "verify"]:
        assert out["worlds"] == 0 and out["segments"] == 0
    else:
        assert out["summary"] == {"worlds": 0, "equal": 0, "differ": 0}
    assert listing(empty_store) == before


# --------------------------------------------------------------------------- option names


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["journal", "read", "--from", "0"], "--from"),  # was "from_inclusive"
        (["inbox", "drain", "--max-items", "0"], "--max-items"),  # was "max_items"
        (["inbox", "enqueue", "--kind", "timer", "--timer-id", ""], "--timer-id"),
        (
            ["inbox", "enqueue", "--kind", "timer", "--timer-id", "t", "--idempotency-key", ""],
            "--idempotency-key",
        ),
    ],
    ids=["from", "max-items", "timer-id", "idempotency-key"],
)
def test_refused_values_are_named_by_their_options(
    made: Made, extra: list[str], option: str
) -> None:
    before = listing(made.data_dir)
    result = aosp(*extra[:2], *made.world_args(*extra[2:]))
    fails(result, 2, "validation", f"{option}: ")
    assert listing(made.data_dir) == before


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["world", "create", "--handle", ""], "--handle"),  # was "handle"
        (["segments", "export", "--target-entries", "0"], "--target-entries"),
    ],
    ids=["handle", "target-entries"],
)
def test_refused_store_wide_values_are_named_by_their_options(
    made: Made, command: list[str], option: str
) -> None:
    before = listing(made.data_dir)
    fails(aosp(*command, *made.args()), 2, "validation", f"{option}: ")
    assert listing(made.data_dir) == before


def test_object_store_failures_name_objects(made: Made, dead_port: int) -> None:
    """An S3 endpoint that refuses connections, met in the middle of fsck: the error names
    ``--objects`` (the object store's own message says which request failed)."""
    objects = f"s3://bucket/prefix?endpoint_url=http://127.0.0.1:{dead_port}&region=us-east-1"
    result = aosp(
        "fsck",
        "--kv",
        f"sqlite://{made.data_dir}/aos.db",
        "--objects",
        objects,
        "--quiet",
        env={"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"},
    )
    fails(result, 3, "backend", "--objects: ", f"127.0.0.1:{dead_port}")


# --------------------------------------------------------------------------- files and directories


def test_world_create_with_a_refused_handle_creates_no_store(tmp_path: Path) -> None:
    for handle in ("", "h" * 100_000):
        result = aosp("world", "create", "--data-dir", str(tmp_path / "d"), "--handle", handle)
        fails(result, 2, "validation", "--handle")
    assert listing(tmp_path) == []


def test_cas_put_of_a_body_not_of_the_expected_hash_names_the_option(made: Made) -> None:
    put = aosp("cas", "put", *made.args("-u", made.universe, "--expect", HASH, "-"), stdin=b"x")
    fails(put, 2, "validation", "--expect: body hashes to ")


def test_cas_put_of_a_missing_file_creates_no_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = aosp("cas", "put", "--data-dir", str(data), "-u", UNIVERSE, str(tmp_path / "nope"))
    fails(result, 3, "not_found", "FILE", "no such file")
    assert listing(tmp_path) == []


def test_cas_put_of_a_directory_creates_no_store(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    result = aosp(
        "cas", "put", "--data-dir", str(tmp_path / "data"), "-u", UNIVERSE, str(tmp_path / "dir")
    )
    fails(result, 2, "validation", "FILE", "is a directory")
    assert listing(tmp_path) == ["dir"]


def test_cas_get_into_a_missing_directory_or_a_directory(made: Made, tmp_path: Path) -> None:
    get = ["cas", "get", *made.args("-u", made.universe, made.blob)]
    fails(aosp(*get, "-o", str(tmp_path / "no" / "out")), 3, "not_found", "--output")
    fails(aosp(*get, "-o", str(tmp_path)), 2, "validation", "--output", "is a directory")
    assert listing(tmp_path) == []


def test_demo_data_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("mine")
    result = aosp("demo", "--data-dir", str(tmp_path / "file"), "--quiet")
    fails(result, 2, "validation", "--data-dir", "is a file")
    assert listing(tmp_path) == ["file"] and (tmp_path / "file").read_text() == "mine"


@pytest.mark.parametrize("where", ["under-a-file", "in-proc"])
def test_a_data_dir_that_cannot_be_created(where: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("mine")
    # /proc refuses mkdir even to root, for whom no permission bits would
    data = tmp_path / "file" / "data" if where == "under-a-file" else Path("/proc/aosp-test")
    result = aosp("world", "create", "--data-dir", str(data))
    fails(result, 3, "backend", "--data-dir", "cannot create it")
    assert listing(tmp_path) == ["file"] and not data.exists()


# --------------------------------------------------------------------------- bad values


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--kind", "inbox", "--source", "s", "--header", "novalue"], ["--header", "NAME=VALUE"]),
        (
            [
                *("--kind", "receipt", "--intent", HASH, "--effect-kind", "e"),
                *("--adapter", "a", "--signature-hex", "zz"),
            ],
            ["--signature-hex", "not hexadecimal"],
        ),
        (
            ["--kind", "timer", "--timer-id", "t", "--payload", "[" * 60_000 + "]" * 60_000],
            ["--payload", "nests too deeply"],
        ),
    ],
    ids=["header", "signature", "deep-payload"],
)
def test_malformed_enqueue_values_are_usage_errors(
    made: Made, extra: list[str], words: list[str]
) -> None:
    before = listing(made.data_dir)
    fails(aosp("inbox", "enqueue", *made.world_args(*extra)), 2, "usage", *words)
    assert listing(made.data_dir) == before


def test_an_infinite_busy_timeout_is_a_usage_error(made: Made) -> None:
    url = f"sqlite://{made.data_dir}/aos.db?busy_timeout=inf"
    result = aosp("inspect", "--kv", url, "--objects", f"file://{made.data_dir}/objects")
    fails(result, 2, "validation", "--kv", "busy_timeout")


def test_a_kernel_that_is_not_a_kernel(made: Made) -> None:
    result = aosp("restore", "verify", *made.args("--kernel", "os:getcwd"))
    fails(result, 2, "validation", "--kernel", "os:getcwd", "not a kernel")


def test_an_incomplete_versionstamp_is_no_inbox_sequence(made: Made) -> None:
    result = aosp("inbox", "read", *made.world_args("--after", "ff" * 12))
    fails(result, 2, "usage", "--after")


def test_argparse_errors_are_one_line_too() -> None:
    fails(aosp("inspect", "-u", "not-a-uuid"), 2, "usage", "--universe", "aosp inspect --help")


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["inspect", "--limit", "-1"], "--limit"),  # was a silent slice [:-1]
        (["snapshot", "promote", "-u", UNIVERSE, "-w", WORLD, "--height", "-1"], "--height"),
        (["bench", "engine", "--seconds", "-1"], "--seconds"),  # was a run of nothing, exit 0
        (["drain", "--follow", "--interval", "1e10"], "--interval"),  # overflowed a wait
    ],
    ids=["inspect-limit", "promote-height", "bench-seconds", "drain-interval"],
)
def test_out_of_range_numbers_are_usage_errors(command: list[str], option: str) -> None:
    fails(aosp(*command), 2, "usage", option)


def test_a_report_directory_that_cannot_be_created_is_refused_before_the_run() -> None:
    result = aosp("conformance", "--report", "/proc/aosp-test/report", "--quiet")
    fails(result, 3, "backend", "--report", "cannot create it")
    assert result.text == ""  # no case ran


# --------------------------------------------------------------------- pipes, Spark, conformance


def test_a_closed_stdout_ends_quietly(made: Made) -> None:
    """``aosp inspect --json | head -1``, made deterministic: the reader is gone before
    the first byte is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if k != "AOSP_DATA_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "aosp", "inspect", *made.args("--json")],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141 and b"Traceback" not in done.stderr
    assert b"error" not in done.stderr


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A loopback port bound but not listening: a connect is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_an_unreachable_spark_master_fails_fast(made: Made, dead_port: int, tmp_path: Path) -> None:
    start = time.monotonic()
    result = aosp(
        "spark",
        "analytics",
        *made.args("--master", f"spark://127.0.0.1:{dead_port}", "--quiet"),
        "--output",
        str(tmp_path / "out"),
    )
    fails(result, 3, "backend", f"127.0.0.1:{dead_port}", "unreachable")
    assert time.monotonic() - start < 20 and listing(tmp_path) == []


@pytest.fixture
def http_port() -> Iterator[int]:
    """A loopback HTTP server (a master's web UI or REST port, mistaken for its RPC port)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel completes them) and never says
    a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def _analytics(made: Made, master: str, output: Path) -> tuple[Result, float]:
    start = time.monotonic()
    result = aosp(
        "spark",
        "analytics",
        *made.args("--master", master, "--quiet"),
        "--output",
        str(output),
        env={"HADOOP_CONF_DIR": None, "YARN_CONF_DIR": None},
    )
    return result, time.monotonic() - start


def test_a_port_that_is_not_a_spark_master_fails_fast(
    made: Made, http_port: int, tmp_path: Path
) -> None:
    """It accepts connections, but answers Spark's RPC in HTTP: Spark used to wait 71 s for
    it and exit 5 with a Java stack."""
    result, seconds = _analytics(made, f"spark://127.0.0.1:{http_port}", tmp_path / "out")
    fails(result, 3, "backend", "--master", f"127.0.0.1:{http_port}", "not a Spark master")
    assert seconds < 20 and listing(tmp_path) == []


@pytest.mark.slow
def test_a_port_that_never_answers_fails_within_the_probe_timeout(
    made: Made, silent_port: int, tmp_path: Path
) -> None:
    result, seconds = _analytics(made, f"spark://127.0.0.1:{silent_port}", tmp_path / "out")
    fails(result, 3, "backend", "--master", f"127.0.0.1:{silent_port}", "did not answer")
    assert seconds < 20 and listing(tmp_path) == []


@pytest.mark.parametrize(
    ("master", "code", "kind", "words"),
    [
        ("yarn", 3, "backend", ["--master yarn", "HADOOP_CONF_DIR", "YARN_CONF_DIR"]),
        ("mesos://127.0.0.1:5050", 2, "validation", ["--master", "not a master Spark runs"]),
        ("local[0]", 2, "validation", ["--master", "local[0]"]),
    ],
    ids=["yarn-unconfigured", "mesos", "local-0"],
)
def test_a_master_this_machine_cannot_use_is_refused_before_spark_starts(
    made: Made, master: str, code: int, kind: str, words: list[str], tmp_path: Path
) -> None:
    result, seconds = _analytics(made, master, tmp_path / "out")
    fails(result, code, kind, *words)
    assert seconds < 20 and listing(tmp_path) == []


@pytest.mark.slow
def test_the_master_probe_accepts_a_real_standalone_master(tmp_path: Path) -> None:
    """The control: a standalone Master (pyspark's own ``spark-class``) passes the probe,
    which costs it one disassociation in its log and no error."""
    import pyspark

    from spark_connectors.session import _java_17, check_master
    from tests.objects.servers import free_ports

    java = _java_17()
    if java is None:
        pytest.skip("no Java 17 for a Spark master")
    spark_home = Path(pyspark.__file__).parent
    port, ui = free_ports(2)
    log = tmp_path / "master.out"
    env = {**os.environ, "JAVA_HOME": java, "SPARK_HOME": str(spark_home)}
    command = [str(spark_home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)]
    with log.open("wb") as out:
        master = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 180
        while "New state: ALIVE" not in log.read_text():
            assert master.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)  # waiting for a server to come up; nothing is timed
        check_master(f"spark://127.0.0.1:{port}")
        down = free_ports(1)[0]
        check_master(f"spark://127.0.0.1:{down},127.0.0.1:{port}")  # one host of two answers
        time.sleep(0.5)  # the disassociation is logged after the probe's connection closes
        assert " ERROR " not in log.read_text(), log.read_text()
    finally:
        master.terminate()
        master.wait(timeout=60)


def test_an_unreachable_fdb_cluster_fails_within_its_timeout(
    fdb_cluster: FdbCluster, dead_port: int, tmp_path: Path
) -> None:
    """A cluster file naming no live coordinator: exit 3 within the URL's timeout, naming
    the timeout and the cluster file (the real client library; it would otherwise wait)."""
    cluster_file = tmp_path / "fdb.cluster"
    cluster_file.write_text(f"test:dead@127.0.0.1:{dead_port}\n")
    (tmp_path / "objects").mkdir()
    before = listing(tmp_path)
    url = f"fdb://{cluster_file}?client_library={fdb_cluster.client_library}&timeout_ms=1500"
    start = time.monotonic()
    result = aosp("inspect", "--kv", url, "--objects", f"file://{tmp_path}/objects")
    fails(result, 3, "backend", "1031", "timeout_ms=1500", str(cluster_file), "reachable")
    assert time.monotonic() - start < 20 and listing(tmp_path) == before


def test_a_conformance_run_that_ran_nothing_is_not_ok(tmp_path: Path) -> None:
    result = aosp(
        "conformance",
        "--kv",
        f"fdb://{tmp_path}/no-such/fdb.cluster",
        "--report",
        str(tmp_path / "report"),
        "--json",
    )
    assert result.code == 3
    assert "error: backend unavailable, nothing ran: " in result.one_line_error()
    summary = result.json()
    assert summary["ok"] is False and summary["passed"] == 0
    assert summary["skipped"] == summary["cases"] > 0
    assert summary["reason"].startswith(f"no case passed: {summary['cases']} skipped (backend")


def test_conformance_list_and_version() -> None:
    listed = aosp("conformance", "--list", "--json")
    assert listed.code == 0
    names = [row["case"] for row in listed.json()]
    assert "case1_cas_put_get_has" in names and all(row["what"] for row in listed.json())
    version = aosp("--version")
    assert version.code == 0 and version.text.startswith("aosp ")


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["inspect"], {"AOSP_DATA_DIR": ""}),
        (["demo", "--data-dir", ""], None),
        (["world", "create", "-u", UNIVERSE, "-w", WORLD, "--data-dir", ""], None),
    ],
    ids=["empty-AOSP_DATA_DIR", "empty-demo-data-dir", "empty-world-create-data-dir"],
)
def test_an_empty_data_dir_is_refused_not_the_working_directory(
    tmp_path: Path, args: list[str], env: dict[str, str | None] | None
) -> None:
    """An empty path would put ``aos.db`` and ``objects/`` in the working directory."""
    fails(aosp(*args, cwd=tmp_path, env=env), 2, "usage", "--data-dir", "empty path")
    assert listing(tmp_path) == []


def test_a_symlink_loop_as_the_store_is_a_typed_refusal(tmp_path: Path) -> None:
    """``ln -s loop loop``: named as the loop it is, for the CLI and the engine alike (it
    was an internal error, ``RuntimeError: Symlink loop``)."""
    (tmp_path / "loop").symlink_to("loop")
    fails(aosp("inspect", "--data-dir", "loop", cwd=tmp_path), 2, "validation", "symlink loop")
    fails(
        aosp("world", "create", "-u", UNIVERSE, "-w", WORLD, "--data-dir", "loop", cwd=tmp_path),
        2,
        "validation",
        "--data-dir",
        "symlink loop",
    )
    with pytest.raises(Validation, match=r"path.*symlink loop"):
        SqliteEngine(tmp_path / "loop" / "aos.db")
    with pytest.raises(Validation, match="symlink loop"):
        open_plane(f"sqlite://{tmp_path}/loop/aos.db", f"file://{tmp_path}/objects")
    assert listing(tmp_path) == ["loop"]


def test_a_long_value_in_a_message_keeps_its_start_and_end(tmp_path: Path) -> None:
    """A 5,000-character path was echoed whole (~10,000 characters of stderr): an error
    keeps at most 1,000 characters, its start and its end around a count of the rest."""
    path = "/" + "a" * 2_500 + "b" * 2_500
    result = aosp("inspect", "--data-dir", path, cwd=tmp_path)
    assert result.code != 0
    line = result.one_line_error()
    assert len(line) <= 1_000 + len("aosp: io error: ")
    assert "characters elided" in line and "/aaaa" in line and line.endswith("bbbb'")
    error = Validation("path", path)
    assert len(str(error)) <= 1_000 and str(error).startswith("path: /aaa")
    assert error.problem == path  # the field keeps the value whole, for a program
