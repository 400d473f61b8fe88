"""Tokenization into Megatron-compatible token files."""
