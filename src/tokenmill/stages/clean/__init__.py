"""The clean stage: escape-leak checks (the OPT lesson), normalization, PII, blocklist, language and quality filters.

`stage.py` wires the steps; each filter (`filters.py`) applies an algorithm of `tokenmill.text`, pure functions over
text that know no stage.
"""
