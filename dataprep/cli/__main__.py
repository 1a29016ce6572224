"""``python -m dataprep.cli``: the ``dataprep`` command."""

from __future__ import annotations

import sys

from dataprep.cli.main import main

sys.exit(main())
