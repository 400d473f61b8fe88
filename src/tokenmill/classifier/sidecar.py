"""A model's sidecar as the clean filter reads it: the preparation options `quality train` recorded beside the model."""

from __future__ import annotations

import json
from pathlib import Path

from tokenmill.classifier.config import PrepareOptions
from tokenmill.errors import ConfigError


def sidecar_path(model_path: str | Path) -> Path:
    """Where a model's sidecar lies: the model's path with `.json` for its suffix (`model.bin` -> `model.json`, as
    `quality train` writes them)."""
    return Path(model_path).with_suffix(".json")


def recorded_edits(model_path: str | Path) -> tuple[dict, dict | None] | None:
    """The `normalize` and `pii` a model's sidecar records (the clean stage's edits its training text went
    through), or None without a sidecar that records them."""
    path = sidecar_path(model_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("normalize"), dict) or "pii" not in data:
        return None
    return data["normalize"], data["pii"]


def preparation(model_path: str | Path, sha256: str | None = None) -> tuple[PrepareOptions, bool]:
    """The preparation options the model was trained with, and whether a sidecar gave them: its sidecar's `prepare`,
    else `PrepareOptions()`'s defaults (a published model such as DCLM's comes without one).

    With `sha256` (the model file's), a sidecar that records another model's hash is refused: it would prepare text
    as some other model was trained. Raises ConfigError naming the sidecar."""
    path = sidecar_path(model_path)
    if not path.is_file():
        return PrepareOptions(), False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        options = PrepareOptions.model_validate(data["prepare"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"the model's sidecar {path} is not a `quality train` model.json ({err}); fix or remove it"
                          ) from None
    recorded = (data.get("model") or {}).get("sha256") if isinstance(data.get("model"), dict) else None
    if sha256 is not None and recorded is not None and recorded != sha256:
        raise ConfigError(f"the model's sidecar {path} describes another model (sha256 {recorded[:12]}..., the model "
                          f"is {sha256[:12]}...): put the model.json that came with it beside it, or remove this one")
    return options, True
