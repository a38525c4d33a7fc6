"""The `zest` command: one module per subcommand, all of them clients of the packages below
(the server itself is `zest.gateway.http`)."""

from zest.gateway.cli._main import main

__all__ = ["main"]
