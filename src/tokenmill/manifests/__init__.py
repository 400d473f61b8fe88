"""The auditors' tools over what the pipeline wrote: `diff` two runs, `show` one, `golden` manifests for tests.

The run-time half (building, checking and writing a manifest, the document tallies) lives beside the commit
protocol in `tokenmill.pipeline` (`manifest.py`, `stats.py`): the runner writes, this package reads."""
