"""The tokenize stage: documents into Megatron-compatible token files, with a held-out split and a dataset index."""
