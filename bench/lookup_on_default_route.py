"""Benchmark: prompt-lookup speculation on routes.yaml's own `summarization` route, as it ships
(its system prompt, example and sampling), against the same route with
`speculative: {method: prompt_lookup}`: whether turning it on by default would pay.

    .venv/bin/python bench/lookup_on_default_route.py [--rounds 6] [--max-tokens 256]
                                                      [--out bench-out/lookup]

One zest serve on loopback serves both routes; the article is `zest bench`'s own
(~1,000 tokens), measured by its speculation phase (rounds alternate which route goes first,
after one untimed round). Printed: decode tokens/s p50 of each, their ratio and the share of
drafted tokens accepted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from zest.bench._phases import speculation
from zest.bench._servers import free_port, zest_server
from zest.bench._spawn import serving

REPO = Path(__file__).resolve().parents[1]
ROUTES = ("summarization", "summarization-lookup")


def routes_file(folder: Path) -> Path:
    config = yaml.safe_load((REPO / "routes.yaml").read_text())
    route = config["routes"]["summarization"]
    config["routes"] = {
        ROUTES[0]: route,
        ROUTES[1]: {**route, "speculative": {"method": "prompt_lookup"}},
    }
    path = folder / "lookup-routes.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=Path("bench-out/lookup"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    server = zest_server(routes_file(args.out), free_port())
    with serving(server.command, server.probe, args.out / server.log, name="zest serve"):
        # The route's own system prompt, example and sampling: the article is the user turn.
        found = speculation(
            server, args.rounds, args.max_tokens, routes=ROUTES, system=None, greedy=False
        )
    print(f"{ROUTES[0]}: decode p50 {found['decode_tps_p50']:.1f} tok/s")
    print(
        f"{ROUTES[1]}: decode p50 {found['lookup_decode_tps_p50']:.1f} tok/s "
        f"({found['ratio']:.2f}x)"
    )
    print(f"drafts accepted: {found['acceptance']:.0%}")


if __name__ == "__main__":
    main()
