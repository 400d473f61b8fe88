"""The clean stage: escape-leak checks (the OPT lesson), normalization, PII, blocklist, language and quality filters.

`stage.py` wires the steps; each step is a module of pure functions over text.
"""
