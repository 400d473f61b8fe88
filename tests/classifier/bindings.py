"""A stand-in for fasttext-predict's `fasttext` module, whose files replace fasttext-numpy2's when installed later."""

from __future__ import annotations

import types
from pathlib import Path


def fasttext_predict_module(tmp_path: Path) -> types.ModuleType:
    """A stand-in for fasttext-predict's `fasttext` module: `load_model` and `predict`, no `get_labels`, no
    `train_supervised` (its files replace fasttext-numpy2's when it is installed later)."""
    import fasttext as real

    class _FastText:
        def __init__(self, path):
            self._model = real.load_model(path)

        def predict(self, text, k=1, threshold=0.0):
            return self._model.predict(text, k=k, threshold=threshold)

    module = types.ModuleType("fasttext")
    module.load_model = _FastText
    module.FastText = types.SimpleNamespace(_FastText=_FastText)
    binding = tmp_path / "fasttext_pybind.so"
    binding.write_bytes(b"not the installed binding")
    module.binding = types.ModuleType("fasttext_pybind")
    module.binding.__file__ = str(binding)
    return module
