"""Spark's own startup WARN lines stay off stderr (``spark_connectors.session.quiet_logs``),
while the job's messages and Spark's errors do not."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_connectors.session import DRIVER_JAVA_OPTIONS, QUIET_LOG4J2, quiet_logs
from tests.cli.conftest import aosp


def test_the_driver_starts_on_the_quiet_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    assert QUIET_LOG4J2.is_file()
    text = QUIET_LOG4J2.read_text()
    assert "rootLogger.level = error" in text and "SYSTEM_ERR" in text
    conf = quiet_logs({"spark.ui.enabled": "false"})
    assert conf[DRIVER_JAVA_OPTIONS] == f"-Dlog4j2.configurationFile={QUIET_LOG4J2.as_uri()}"
    assert conf["spark.ui.enabled"] == "false"
    given = quiet_logs({DRIVER_JAVA_OPTIONS: "-Xss4m"})[DRIVER_JAVA_OPTIONS]
    assert given.endswith(" -Xss4m") and given.startswith("-Dlog4j2.configurationFile=")


def test_a_configuration_the_caller_chose_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    own = {DRIVER_JAVA_OPTIONS: "-Dlog4j2.configurationFile=/etc/spark/mine.properties"}
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    assert quiet_logs(own) == own
    (tmp_path / "log4j2.properties").write_text("rootLogger.level = info\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert quiet_logs({}) == {}


def test_a_spark_command_prints_no_spark_warnings(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    data = str(tmp_path / "data")
    assert aosp("world", "create", "--data-dir", data).code == 0
    result = aosp("spark", "replay-check", "--data-dir", data, "--master", "local[1]")
    assert result.code == 0, result.err
    assert "1/1 world: restore equals full replay" in result.text
    lines = result.err.splitlines()
    # ours, and the one line the JVM prints for the module Spark's launcher adds
    # (--add-modules=jdk.incubator.vector; no log level reaches it)
    assert [line for line in lines if not line.startswith("... ")] in (
        [],
        ["WARNING: Using incubator modules: jdk.incubator.vector"],
    ), result.err
    assert "... starting Spark (local[1])" in lines and "... checking worlds" in lines
