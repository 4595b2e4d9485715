"""`python -m envgym.cli ...`, the same as the `envgym` console script."""

import sys

from envgym.cli import main

sys.exit(main())
