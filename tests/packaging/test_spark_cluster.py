"""The Spark jobs on a real standalone cluster, fed the built wheel.

A Master and two Workers (one core each) run on loopback, started with pyspark's own
``spark-class``. The executors' Python is an environment with the dependencies (pyarrow,
cbor2, blake3, boto3, foundationdb) but **not** this package: it reaches them only as the
wheel the driver ships (``--py-files``). The store is FoundationDB 7.3 plus segments on
SeaweedFS through ``s3://`` URLs, so every executor opens it over the network as a real
cluster's would. ``aosp spark replay-check``, ``analytics`` and ``replay-follow`` (the
``aos_journal`` stream) run from an environment where
the wheel is installed with its ``s3``, ``spark`` and ``fdb`` extras, outside the checkout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fdb_cluster import FdbCluster
from tests.objects.servers import S3Server, free_ports
from tests.packaging.conftest import Dist, Env, make_env
from tests.spark.conftest import SegmentStore, build_store

JAVA_17 = "/usr/lib/jvm/java-17-openjdk-amd64"
START_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def driver_env(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Env:
    """The wheel with the extras a Spark driver of the jobs needs."""
    return make_env(
        tmp_path_factory.mktemp("driver-env"),
        f"aos-persistence[s3,spark,fdb] @ {dist.wheel.as_uri()}",
    )


@pytest.fixture(scope="module")
def executor_env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    """The executors' Python: the dependencies, not the package."""
    return make_env(
        tmp_path_factory.mktemp("executor-env"),
        "pyarrow",
        "cbor2",
        "blake3",
        "boto3",
        "foundationdb",
    )


@dataclass(frozen=True)
class SparkCluster:
    master: str
    logs: Path


def _java_home() -> str:
    if not Path(JAVA_17).is_dir():
        pytest.skip(f"Java 17 not found at {JAVA_17}")
    return JAVA_17


@pytest.fixture(scope="module")
def spark_cluster(
    driver_env: Env, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SparkCluster]:
    """A standalone Master and two Workers on 127.0.0.1, from the driver env's pyspark."""
    logs = tmp_path_factory.mktemp("spark-cluster")
    (spark_home,) = driver_env.path.glob("lib/python*/site-packages/pyspark")
    port, ui, ui_1, ui_2 = free_ports(4)
    env = {
        **os.environ,
        "JAVA_HOME": _java_home(),
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(logs),
    }
    env.pop("PYTHONPATH", None)
    spark_class = str(spark_home / "bin" / "spark-class")
    master = f"spark://127.0.0.1:{port}"
    commands = [
        ("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(port), "--webui-port", str(ui)]),
        *[
            (f"worker-{i}", [spark_class, "org.apache.spark.deploy.worker.Worker", "--host",
                             "127.0.0.1", "--cores", "1", "--memory", "1G", "--webui-port",
                             str(web), "--work-dir", str(logs / f"work-{i}"), master])
            for i, web in ((1, ui_1), (2, ui_2))
        ],
    ]  # fmt: skip
    procs = []
    try:
        for name, command in commands:
            with open(logs / f"{name}.out", "wb") as out:
                procs.append(
                    subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
                )
        deadline = time.monotonic() + START_TIMEOUT
        alive = 0
        while alive < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                tails = "\n".join((logs / f"{n}.out").read_text()[-1500:] for n, _ in commands)
                raise RuntimeError(f"the Spark cluster did not start ({alive} workers):\n{tails}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as reply:
                    alive = int(json.load(reply).get("aliveworkers", 0))
            except OSError:
                alive = 0
            time.sleep(0.5)  # polling a server coming up; nothing is asserted on timing
        yield SparkCluster(master, logs)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def cluster_store(
    fdb_cluster: FdbCluster, seaweedfs_s3: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SegmentStore, dict[str, str]]]:
    """Worlds with exported segments on FoundationDB + SeaweedFS; the S3 credentials."""
    credentials = {
        "AWS_ACCESS_KEY_ID": seaweedfs_s3.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweedfs_s3.secret_key,
    }
    bucket = seaweedfs_s3.create_bucket()
    objects = (
        f"s3://{bucket}/aos?endpoint_url={seaweedfs_s3.endpoint_url}"
        f"&region={seaweedfs_s3.region}&multipart=0"
    )
    saved = {k: os.environ.get(k) for k in credentials}
    os.environ.update(credentials)
    try:
        store = build_store(
            tmp_path_factory.mktemp("cluster-store"), seed=31, worlds=3, kv=fdb_cluster.url,
            objects=objects,
        )  # fmt: skip
        yield store, credentials
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        seaweedfs_s3.remove_bucket(bucket)


def _spark_options(
    cluster: SparkCluster, dist: Dist, executor_env: Env, credentials: dict[str, str]
) -> list[str]:
    conf = {
        "spark.pyspark.python": str(executor_env.python),
        "spark.executor.memory": "768m",
        **{f"spark.executorEnv.{k}": v for k, v in credentials.items()},
    }
    options = ["--master", cluster.master, "--py-files", str(dist.wheel)]
    for key, value in conf.items():
        options += ["--conf", f"{key}={value}"]
    return options


def test_replay_check_and_analytics_on_a_standalone_cluster(
    spark_cluster: SparkCluster,
    driver_env: Env,
    executor_env: Env,
    dist: Dist,
    cluster_store: tuple[SegmentStore, dict[str, str]],
) -> None:
    store, credentials = cluster_store
    spark = _spark_options(spark_cluster, dist, executor_env, credentials)
    where = ["--kv", store.kv, "--objects", store.objects, "-u", str(store.universe)]
    env = {**credentials, "JAVA_HOME": _java_home()}
    started = time.monotonic()
    check = driver_env.run(
        "aosp", "spark", "replay-check", *where, *spark, "--json", "--quiet", env=env
    )
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-4000:]
    report = json.loads(check.stdout)
    assert report["summary"] == {"worlds": 3, "equal": 3, "differ": 0}
    assert {r["world"] for r in report["worlds"]} == {str(w) for w in store.worlds}
    assert all(r["entries_replayed"] > 0 for r in report["worlds"])

    output = driver_env.workdir / "analytics"
    stats = driver_env.run(
        "aosp", "spark", "analytics", *where, *spark, "--output", str(output), "--json",
        "--quiet", env=env,
    )  # fmt: skip
    assert stats.returncode == 0, stats.stdout[-2000:] + stats.stderr[-4000:]
    segments = json.loads(stats.stdout)["segments"]
    for world in store.worlds:
        records = store.plane.list_segments(store.universe, world)
        (row,) = [r for r in segments if r["world"] == str(world)]
        assert row["segments"] == len(records)
        assert row["cold_through"] == records[-1].end

    # the aos_journal stream on the cluster: the continuous check, once, from a checkpoint
    follow = driver_env.run(
        "aosp", "spark", "replay-follow", *where, *spark, "--once", "--json", "--quiet",
        "--checkpoint", str(driver_env.workdir / "follow-checkpoint"),
        "--output", str(driver_env.workdir / "follow"), env=env,
    )  # fmt: skip
    assert follow.returncode == 0, follow.stdout[-2000:] + follow.stderr[-4000:]
    checks = json.loads(follow.stdout)["checks"]
    assert sorted(r["world"] for r in checks) == sorted(str(w) for w in store.worlds)
    assert all(r["equal"] and r["batch_id"] == 0 for r in checks)
    print(
        "standalone cluster: replay-check + analytics + replay-follow in "
        f"{time.monotonic() - started:.1f}s"
    )


PROBE = """
import json, sys
from spark_connectors.session import spark_session
master, wheel, python = sys.argv[1:4]
spark = spark_session(master, "probe", py_files=[wheel], **{"spark.pyspark.python": python})
rdd = spark.sparkContext.parallelize(range(4), 4)
print(json.dumps(rdd.map(lambda _: __import__("segments").__file__).collect()))
spark.stop()
"""


def test_executors_import_the_package_from_the_shipped_wheel(
    spark_cluster: SparkCluster, driver_env: Env, executor_env: Env, dist: Dist
) -> None:
    alone = executor_env.run("python", "-c", "import segments")
    assert alone.returncode != 0 and "No module named 'segments'" in alone.stderr
    done = driver_env.run(
        "python", "-c", PROBE, spark_cluster.master, str(dist.wheel), str(executor_env.python),
        env={"JAVA_HOME": _java_home()},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    paths = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(paths) == 4
    shipped = dist.wheel.stem + ".zip"
    assert all(f"{shipped}/segments/__init__.py" in path for path in paths), paths
