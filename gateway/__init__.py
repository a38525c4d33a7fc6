"""The gateway: `http` (the Litestar app), `serving` (the runtime behind it) and `cli` (the
`zest` command). Nothing is imported here, so `zest chat` does not load the server and its
engines just to reach `zest.gateway.cli`: import from the subpackage you need."""
