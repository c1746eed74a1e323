"""mooncake.cli_bench: Mooncake's module behind the ``transfer_engine_bench`` command.

``main()`` runs the transfer engine benchmark with ``sys.argv[1:]`` (Mooncake's gflags,
translated to ``mooncake bench transfer``: see ``mooncake.cli``) and returns its exit code.
"""

import sys

from .cli import transfer_engine_bench_main

__all__ = ["main"]


def main():
    return transfer_engine_bench_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
