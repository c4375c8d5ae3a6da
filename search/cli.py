"""The `autorelay` command line. It lives in `search` because that is where the compiler
(`autorelay`) and the tuning log (`tuning_db`) are composed; each subcommand is a small function
registered below.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _cmd_check(args: argparse.Namespace) -> int:
    from autorelay.errors import AutoRelayError
    from autorelay.ir.parser import parse
    from autorelay.ir.printer import astext
    from autorelay.typing import infer_types

    try:
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        print(f"autorelay check: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 2
    try:
        mod = infer_types(parse(text, source=args.file))
    except AutoRelayError as e:
        print(f"autorelay check: {e}", file=sys.stderr)
        return 1
    print(astext(mod, show_types=True))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autorelay", description="AutoRelay: an autotuning DL compiler")
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="parse, type-check and print a Relay text program")
    check.add_argument("file", help="a .relay / .rly text file")
    check.set_defaults(func=_cmd_check)
    from tuning_db.cli import add_db_commands  # the `db` group: inspect and maintain the tuning log

    add_db_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
