"""loaders.read: what a user composes to read shards (topology, seeds, order, sampler, shard readers,
datasets, decode, per-sample transforms). Public names are re-exported by ``loaders``; see loaders/README.md."""
