"""A deterministic, resumable, elastic PyTorch loader over the tokenize stage's token files (numpy and torch only)."""

from tokenmill.loader.loader import ResumeError, TokenLoader
from tokenmill.loader.stateful import LoaderState
from tokenmill.loader.streams import DataError

__all__ = ["DataError", "LoaderState", "ResumeError", "TokenLoader"]
