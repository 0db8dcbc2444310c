"""The protocols: every transaction of the plane, written once as coroutines that take the
transaction first and compose (``persistence/kv.py``), importing nothing above them."""
