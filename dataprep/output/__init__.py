"""Where a run's files go: OUT as a folder or an object store (``OutputStore``), the staging folder (see README.md)."""
