"""A TokenLoader in a DCP checkpoint: its JSON state as one string, a `Stateful` that `dcp.save` and `dcp.load` call."""

from __future__ import annotations

import json
from typing import Any


class LoaderState:
    """``{"loader": LoaderState(loader)}`` in a DCP app state: saved with the model, loaded back into ``loader``.

    DCP's ``Stateful`` is a runtime-checkable protocol (``state_dict`` and ``load_state_dict``), so this is one
    without importing DCP, which would cost every user of the loader most of a second.

    One JSON string, not the state's lists as values: DCP loads a value into the one the target state holds now, and
    the state's lists (skips, streams) change length between a save and a load. The loader's own checks apply on
    load (another seed, other data: a ResumeError naming what differs)."""

    def __init__(self, loader: Any):
        self.loader = loader

    def state_dict(self) -> dict[str, str]:
        return {"json": json.dumps(self.loader.state_dict(), sort_keys=True)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loader.load_state_dict(json.loads(state_dict["json"]))
