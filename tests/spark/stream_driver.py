"""A streaming query's driver, run as its own process by ``test_stream``'s kill test:
reads ``aos_journal`` from a checkpoint, writes each micro-batch to ``<out>/batch=<id>``
(overwritten when a batch is run again: an idempotent sink) and prints ``batch <id>`` once
it is written; exits when the heads of its start are read (Trigger.AvailableNow).

Usage: python -m tests.spark.stream_driver KV OBJECTS CHECKPOINT OUT MAX_ENTRIES
"""

from __future__ import annotations

import sys
from typing import Any


def main(kv: str, objects: str, checkpoint: str, out: str, max_entries: str) -> None:
    from spark_connectors.session import spark_session

    spark = spark_session(
        "local[1]", "aosp-stream-driver", **{"spark.ui.showConsoleProgress": "false"}
    )
    spark.sparkContext.setLogLevel("ERROR")

    def write(batch: Any, batch_id: int) -> None:
        rows = batch.select("world", "height", "entry")
        rows.write.mode("overwrite").parquet(f"{out}/batch={batch_id:06d}")
        print(f"batch {batch_id}", flush=True)

    query = (
        spark.readStream.format("aos_journal")
        .options(kv=kv, objects=objects, max_entries_per_batch=max_entries)
        .load()
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
