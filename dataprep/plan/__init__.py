"""The persisted plan of a run: its units and ranges, the duplicate sets, the checkpoint (see README.md)."""
