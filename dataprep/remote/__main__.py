"""``python -m dataprep.remote URL CONFIG_JSON``: a transfer helper process (see ``dataprep.remote.helper``)."""

from __future__ import annotations

import sys

from dataprep.remote.helper import main

if __name__ == "__main__":
    sys.exit(main())
