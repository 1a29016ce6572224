"""Where the plan's ranges are written: the write loop, on this machine or as Ray tasks (see README.md)."""
