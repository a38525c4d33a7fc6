"""`python -m zest.gateway`: the `zest` command (as `python -m zest`)."""

import sys

from zest.gateway.cli import main

sys.exit(main())
