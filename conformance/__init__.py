"""The conformance suite: one set of cases every backend must pass.

* :mod:`conformance.cases` -- the cases (section 8 of the source specification), written
  against the contracts only;
* :mod:`conformance.fault_matrix` -- commit faults (1020, 1021 and 1031 applied, not applied
  and late, 1007), competing writers between an attempt and its retry, and crashes at every
  protocol step, recovered by a new plane, on fault-capable engines;
* :mod:`conformance.torture` -- SIGKILL crash torture of writer, appender, drainer, exporter
  and compactor OS processes (:mod:`conformance.torture.worker`) on a store they share --
  with its server processes killed too, for FoundationDB -- and its checks;
* :mod:`conformance.doors` -- the doors a run reaches the plane through: blocking, or every
  operation awaited on the plane's ``AsyncPlane`` from an event loop;
* :mod:`conformance.model` -- the oracle model of the contracts, for differential tests;
* :mod:`conformance.runner` -- runs the cases and writes JUnit XML and a JSON summary;
* :mod:`conformance.pytest_plugin` -- ``ConformanceTests``, to run the suite inside a
  third-party backend's own pytest run;
* ``aosp conformance --kv URL --objects URL --profile quick|full --door blocking|asyncio
  --report DIR``.
"""
