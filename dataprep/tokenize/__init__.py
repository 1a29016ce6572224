"""Text -> token ids for token shards: the tokenizer and the write loop's token stage (see README.md)."""
