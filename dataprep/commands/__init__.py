"""The commands: ``shard`` (its options, opening OUT, the run's end), ``verify``, ``info``, ``index``."""
