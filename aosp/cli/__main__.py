"""``python -m aosp.cli``: the same as the ``aosp`` command."""

import sys

from aosp.cli import main

sys.exit(main())
