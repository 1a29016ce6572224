"""``python -m loaders.profiler`` is ``shardfeed-profile``."""

from __future__ import annotations

from loaders.profiler.cli import main

raise SystemExit(main())
