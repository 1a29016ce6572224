"""WebDataset tar shards: the writer (``writer``) and the index sidecar that readers seek with (``index``)."""
