"""`python -m jpushare.service serve|init|admin …`: the server commands alone (tests use it)."""

from __future__ import annotations

import argparse
import sys

from jpushare.service.cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jpushare")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
