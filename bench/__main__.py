"""Command line: ``python -m bench NAME [--repeat N] [--trials N] [--param key=value ...]``."""

from __future__ import annotations

import argparse
import ast

from bench.harness import run


def _parse_param(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def main() -> None:
    parser = argparse.ArgumentParser(description="Run a raytide benchmark several times and report medians.")
    parser.add_argument("name", help="benchmark name: bench/bench_<name>.py")
    parser.add_argument("--repeat", type=int, default=None,
                        help="number of runs (default: the benchmark's REPEAT, else 5)")
    parser.add_argument("--trials", type=int, default=None, help="trials per run, for benchmarks that take them (chaos)")
    parser.add_argument("--param", action="append", default=[], help="override a parameter, key=value")
    args = parser.parse_args()
    params = dict(_parse_param(p) for p in args.param)
    if args.trials is not None:
        params["trials"] = args.trials
    run(args.name, args.repeat, params)


if __name__ == "__main__":
    main()
