"""`python -m benchc`: the same as the `benchc` command."""

import sys

from .cli import main

sys.exit(main())
