"""The clean stage: escape-leak checks (the OPT lesson), normalization, PII, blocklist, language and quality filters.

`stage.py` wires the chain (`chain.py`) of the filters in `filters/`, one module each, declaring its settings,
reasons, columns and input cases (`filter.py`); the config is built from them (`config.py`). Each filter applies an
algorithm of `tokenmill.text`, pure functions over text that know no stage.
"""
