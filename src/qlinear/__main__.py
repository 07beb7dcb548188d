"""``python -m qlinear ...`` runs the ``qlinear`` command."""

import sys

from qlinear.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
