"""loaders.loader: the DataLoader's chain (settings, progress, worker pool, one pass: batch source ->
workers -> failures -> device prefetch). ``loaders.DataLoader`` is its facade; see loaders/README.md."""
