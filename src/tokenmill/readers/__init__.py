"""Readers, one module per format family: each declares its `Reader`s, which register under their format names.

Nothing here imports them: `tokenmill.sources.formats` finds every module of this package by name (`READERS`)."""
