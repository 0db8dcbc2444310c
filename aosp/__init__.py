"""``aosp``: the operator tool of the persistence plane -- the command line, the demo (the
main job), ``fsck`` and the benchmarks. It sits on top of every other package and nothing
imports it."""
