"""`python -m zest`: the `zest` command."""

import sys

from zest.gateway.cli import main

sys.exit(main())
