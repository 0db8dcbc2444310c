"""SIGKILL crash torture: OS processes write, drain, export, compact and collect orphans on
one shared store while the torture kills them at random moments (once they have opened
their logs) and restarts them, forked from a server that imported the worker once (and,
given server faults, kills and restarts the store's own server processes); then every
invariant is checked against what the processes durably acknowledged and what each call
reported.

Roles (:mod:`conformance.torture.worker`, one OS process each, restarted after each kill):

* **writers** enqueue items with unique idempotency keys into the worlds, singly and in
  batches of three. Before a call a writer logs its *intent*, after it returns the *ack*
  with the sequences, both with the wall-clock time. A restarted writer resumes at the first
  call it has no ack for, so a call that was interrupted is repeated with the same keys (and
  must not duplicate). Every few calls a writer also repeats one of its acknowledged calls
  whose first attempt began a quarter to half of the inbox window ago (a *redo*, logged).
* **appenders** append entries straight to a world's journal at the head they read, one
  per call, logging the intent (with that head) and the height the call reported. After an
  unknown outcome (a kill, or a ``Backend`` error while the cluster recovers) the call is
  redone with ``retry_append_batch`` and the same head: it appends the entry, reports where
  the unknown attempt put it, or reports that it did not land.
* **drainers** drain the worlds in small random batches and log every drain that moved items.
* **drain workers** (``TortureConfig.drain_workers``, 2) each run a
  :class:`~persistence.workers.drain_worker.DrainWorker` on their shard (worker ``i`` of ``n``;
  the run's worlds are drawn so that every shard has one): they find the worlds through the
  ready marks and drain a few items per world and turn, every ready world of the shard in one
  multi-world transaction, and log each world a transaction drained as a drainer logs a
  drain (with the transaction's world count).
* one **exporter** replays the reference kernel from the active baseline to the head,
  commits that state as a snapshot at the head (promoting it two times in three), puts
  that height's *attachment* (20,000-40,000 bytes derived from the world and the height,
  :func:`~conformance.torture.workload.attachment`: an external CAS body, above the 16 KiB
  inline threshold) and exports the journal below the baseline to segments; it logs each
  snapshot and segment, and each attachment put before (intent) and after (the hash, and
  how often the put pinned and waited on a doom). A restarted exporter first puts again
  the attachment whose outcome it lost: the same bytes, so the same hash, racing the
  collectors over the body the killed attempt may have uploaded. One put in fifty (the
  fourth of the run first) *stalls* after its upload until a collector has expired its pin
  and deleted its body, as a client slower than the grace does, and then starts over; a
  put that waits on a doom for a second gives up (logged: a doom whose collector died
  stands for its lease, minutes).
* **compactors** run inbox compaction passes (``persistence.workers.compactor``) over the
  worlds twice per mark interval (a sixteenth of the run's window,
  ``TortureSize.compaction_retention_seconds``, with which every plane of the run is
  opened), a few items per transaction, and log what each pass reported removing. After
  each pass a compactor collects orphans: the run's CAS bodies that no metadata names and
  no pin younger than a short grace protects (``cas_bodies.collect``,
  ``TortureConfig.orphan_grace_seconds``, 1 s: the pins of killed or stalled puts expire
  during the run, and those puts must pin again), then each world's segment objects below
  its index's coverage that no record names and its finished export marker
  (``segments.collect.collect_world``); it logs what the collection reported.

Every log line is appended and fsynced **after** the call returned, so it is a durable
acknowledgement. Each incarnation of a process writes its own file, so a line torn by a kill
is always the last of its file, and is ignored (that call is unacknowledged).

While they run, a monitor thread of the torture's own process samples every world: the head,
the cursor and the baseline never move back, snapshot index entries and segment records
never change or vanish, and journal entries read (stitched from segments and the hot tail)
never change. With server faults (:mod:`~conformance.torture.servers`) a non-coordinator
server process is SIGKILLed every few seconds and restarted, one down at a time; a call that
fails with ``Backend`` meanwhile is redone as after a kill, and the monitor counts its own
failed reads instead of reporting them. After the run every process is killed, and the store
is checked:

1. before any repair: every acknowledged item is either journaled once or pending after the
   cursor (one gone from above the cursor was *removed*); every inbox item still has its
   idempotency entry, and no entry names a removed item (compaction removes an item only at
   or below the cursor, and with its entry); every world with items after its cursor has its
   ready mark (else no drain worker would find them);
2. after a final clean drain, export and orphan collection (on a clock the grace ahead, so
   the pins of killed puts have expired; then nothing may be left collectable but bodies
   under a doom): no world is still marked ready; heights are contiguous through segments
   and hot tail; every journaled item was attempted by a writer, is journaled at most once, in the
   world it was sent to, under the sequence its writer was given; every acknowledged item is
   journaled exactly once; drains are in sequence order and every acknowledged drain is in
   the journal as logged; the cursor is the last drained item; every appended entry is
   journaled at most once, in its world, in its appender's order, and every acknowledged one
   exactly at the height its call reported; acknowledged snapshots are indexed as logged, no
   two calls reported indexing (or promoting) the same height, a reported promotion is in
   the journal, each indexed height is announced once, every snapshot body equals the
   replay of the journal to its height; baselines only move forward and the active one is
   the last announced; segments are contiguous, below the baseline and as logged;
   restore (baseline + segments + hot tail) equals full replay, byte for byte; every redo
   returned inside the window (else the run's window was too short for its redos: a
   ``window`` violation), and every redo of an acknowledged call got the acknowledged
   sequences; the compactors reported removing no more than the inboxes lost; and a run
   long enough for compaction (:func:`~conformance.torture.figures.compaction_due`) removed
   items and idempotency entries. No referenced object was deleted: every acknowledged
   attachment reads back (``get`` verifies the hash) as exactly its bytes, and every body
   the universe's CAS metadata names reads back verified (acknowledged
   snapshots and segments are read above, through ``get`` and the stitched journal, so a
   deleted one is a violation there too); and a run long enough for orphan collection
   (:func:`~conformance.torture.figures.orphan_collection_due`) acknowledged a collection
   pass.

Modules: :mod:`~conformance.torture.workload` (what is sent, the configuration),
:mod:`~conformance.torture.evidence` (logs and acknowledgements),
:mod:`~conformance.torture.monitor`, :mod:`~conformance.torture.checks` (with
:mod:`~conformance.torture.reads`, :mod:`~conformance.torture.orphan_checks` and
:mod:`~conformance.torture.restore_checks`),
:mod:`~conformance.torture.fleet` (the processes), :mod:`~conformance.torture.worker` (one
process), :mod:`~conformance.torture.servers` (the store's server processes),
:mod:`~conformance.torture.killer` (when and what to kill),
:mod:`~conformance.torture.figures` (what a run reports) and
:mod:`~conformance.torture.run` (:func:`run_torture`, and :func:`crash_torture`, the
conformance cases).

The run reports, besides kills and acknowledgements, what the processes' retry runners
retried and raised per engine error code, the calls that failed with ``Backend``, the
slowest call and redo, what compaction did (passes, what they reported, what the inboxes
lost), what orphan collection did (attachments acknowledged, interrupted, put again, pinned
again, stalled and given up; bodies and bytes the passes collected, bodies they saw pinned,
pins expired, dooms resumed, segment objects collected, markers cleared; and what the final
pass found left), and (for an ``fdb-local`` cluster) the recoveries the servers logged.
"""
