"""``python -m dataprep.synthetic OUT [--images N] [--classes K] [--seed S] [--no-broken] [--no-tables] [--no-text]
[--documents N]``."""

from __future__ import annotations

import sys

from dataprep.synthetic.cli import main

if __name__ == "__main__":
    sys.exit(main())
