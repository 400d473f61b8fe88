"""Tokenization into Megatron-compatible token files: the tokenizer, the training sample, the token-file bundle and
its `tokens.json` index."""
