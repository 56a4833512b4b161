"""``python -m inference``: see :mod:`inference.cli`."""

import sys

from .cli import main

sys.exit(main())
