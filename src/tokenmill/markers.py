"""The node-local folder where a file that passed a full check leaves its marker (token files, classifier models).

Kept apart from the loader and the classifier so that either can find it without importing the other (the loader
brings torch, about 2 s per Ray worker).
"""

from __future__ import annotations

import os
from pathlib import Path

VERIFIED_CACHE_ENV = "TOKENMILL_VERIFIED_CACHE"


def markers_dir() -> Path | None:
    """The folder of verified markers (`$TOKENMILL_VERIFIED_CACHE`, else `$XDG_CACHE_HOME/tokenmill/verified`, else
    `~/.cache/tokenmill/verified`), or None when the variable is `off` (or empty, `0`, `none`)."""
    value = os.environ.get(VERIFIED_CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "off", "0", "none") else Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tokenmill" / "verified"
