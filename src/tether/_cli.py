"""The ``tether`` command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ("main",)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="tether: durable Trio workflows")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("demo", help="run the checkout demo (fails, resumes, times out on time)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``tether`` and ``python -m tether``."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from ._demo import main as demo

        return demo()
    raise AssertionError(args.command)  # pragma: no cover - argparse refuses others
