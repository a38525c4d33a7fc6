"""zest: a declarative routing gateway for local LLMs.

The packages of the repository's top-level folders live under this one namespace:
`zest.router` (routes.yaml and plans), `zest.policies` (budgets, trimming, fallback, privacy),
`zest.engines` (the engines, admission, the pool) and `zest.gateway` (`http` server, `serving`
runtime, `cli`). `zest.errors` is the one exception tree they share.
"""

__version__ = "0.1.0"
