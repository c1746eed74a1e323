"""mooncake.cli_client: Mooncake's module behind the ``mooncake_client`` command.

``main()`` runs a storage client (``mooncake store``) with ``sys.argv[1:]`` (Mooncake's
gflags, translated by ``mooncake.cli``) and returns its exit code.
"""

import sys

from .cli import client_main

__all__ = ["main"]


def main():
    return client_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
