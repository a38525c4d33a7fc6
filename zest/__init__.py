"""zest: a declarative routing gateway for local LLMs.

The packages of the repository's top-level folders live under this one namespace:
`zest.router` (routes.yaml and plans), `zest.policies` (budgets, trimming, fallback, privacy),
`zest.engines` (the engines, admission, the pool) and `zest.gateway` (`http` server, `serving`
runtime, `cli`). `zest.errors` is the one exception tree they share. `zest.affinity_key` is
for clients of a fleet: the routing key of a request (zest.affinity).
"""

from zest.affinity import affinity_key

__all__ = ["__version__", "affinity_key"]

__version__ = "0.1.0"
