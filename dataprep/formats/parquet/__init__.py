"""Parquet shards: the writer (``writer``); readers use pyarrow and the manifest."""
