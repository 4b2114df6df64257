"""`vkdecode <subcommand>`: a small dispatcher; each subcommand lives in its own module
(devices, run, serve, stats, bench) and registers its parser; shared options are in options.py."""

from __future__ import annotations

import argparse
import sys

from vkdecode.errors import VkDecodeError


def build_parser() -> argparse.ArgumentParser:
    from vkdecode.cli import bench, devices, run, serve, stats

    parser = argparse.ArgumentParser(prog="vkdecode", description="LLM decode on any Vulkan GPU")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (
        devices.add_devices_parser,
        run.add_run_parser,
        serve.add_serve_parser,
        stats.add_stats_parser,
        bench.add_bench_parser,
    ):
        add(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except VkDecodeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
