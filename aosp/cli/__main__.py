"""``python -m persistence.cli``: the same as the ``aosp`` command."""

import sys

from persistence.cli import main

sys.exit(main())
