"""A SparkSession for the connector's jobs: local by default, any master when given.

PySpark 4.3 needs Java 17. When ``JAVA_HOME`` is unset or not a Java 17, the session looks
for one in the usual Debian location before starting the JVM.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

from persistence.errors import MissingDependency

JAVA_17_GLOB = "/usr/lib/jvm/java-17-openjdk*"


def _java_17() -> str | None:
    current = os.environ.get("JAVA_HOME", "")
    if "17" in os.path.basename(current.rstrip("/")) and os.path.isdir(current):
        return current
    found = sorted(glob.glob(JAVA_17_GLOB))
    return found[0] if found else (current or None)


def spark_session(master: str | None = None, app_name: str = "aosp", **conf: str) -> Any:
    """Get or create a SparkSession (``local[*]`` unless ``master``), with Python filter
    push-down on and the ``aos_segments`` source registered."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise MissingDependency(
            "pyspark is not installed: pip install 'aos-persistence[spark]'"
        ) from None
    java_home = _java_17()
    if java_home:
        os.environ["JAVA_HOME"] = java_home
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master or "local[*]")
        .appName(app_name)
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "2g")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from spark_connectors.source import SegmentDataSource

    spark.dataSource.register(SegmentDataSource)
    return spark
