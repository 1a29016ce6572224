"""Token shards (Megatron-Core ``IndexedDataset``): the writer (``writer``) and the ``.idx`` format (``index``)."""
