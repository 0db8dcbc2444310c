"""The conformance suite: one set of cases every backend must pass.

* :mod:`conformance.cases` -- the cases (section 8 of the source specification), written
  against the contracts only;
* :mod:`conformance.runner` -- runs them and writes JUnit XML and a JSON summary;
* :mod:`conformance.pytest_plugin` -- ``ConformanceTests``, to run the suite inside a
  third-party backend's own pytest run;
* ``aosp conformance --kv URL --objects URL --profile quick|full --report DIR``.
"""
