"""A fastText model is checked before any text is scored: its size against what its header implies, its labels, a
self-test. On real files (the demo's model, a `quality train` model, quantized ones, the lid.176.ftz that language
identification loads), each cut short, padded or with a damaged header: refused, naming the file."""

from __future__ import annotations

import random
import struct
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.classifier.bindings import fasttext_predict_module
from tests.stages.clean.classifier_model import train_tiny
from tokenmill.classifier.score import load_model
from tokenmill.demo import write_demo_corpus
from tokenmill.errors import ConfigError
from tokenmill.stages.clean import langid


@pytest.fixture(scope="module")
def real_models(tmp_path_factory) -> dict[str, Path]:
    """Every kind of fastText file tokenmill meets, made by fastText itself."""
    import fasttext

    root = tmp_path_factory.mktemp("models")
    write_demo_corpus(root / "demo", seed=1234)  # trains demo/quality/model.bin, as `tokenmill demo-data` does
    demo = root / "demo" / "quality" / "model.bin"
    models = {"demo": demo, "quality-train": train_tiny(root / "tiny").model_path, "lid.176.ftz": langid.model_path()}
    for name, options in (("demo.ftz", {}), ("demo-pruned-qnorm.ftz", {"qnorm": True, "cutoff": 500})):
        model = fasttext.load_model(str(demo))
        model.quantize(retrain=False, **options)
        model.save_model(str(root / name))
        models[name] = root / name
    return models


@pytest.fixture(scope="module")
def qout_model(tmp_path_factory) -> Path:
    """A model whose output matrix is quantized too: fastText does that (qout) only with 256 labels or more."""
    import fasttext

    from tokenmill.classifier.fit import fit

    root = tmp_path_factory.mktemp("qout")
    rng = random.Random(0)
    lines = [f"__label__c{c} " + " ".join(f"w{c + rng.randrange(4)}" for _ in range(6)) + "\n"
             for c in (rng.randrange(300) for _ in range(6000))]
    (root / "many.txt").write_text("".join(lines))
    fit(root / "many.txt", root / "many.bin", {"dim": 12, "epoch": 2, "bucket": 2000, "thread": 1, "verbose": 0})
    model = fasttext.load_model(str(root / "many.bin"))
    model.quantize(retrain=False, qnorm=True, qout=True, cutoff=1000, dsub=3)
    model.save_model(str(root / "many-qout.ftz"))
    return root / "many-qout.ftz"


KINDS = ("demo", "quality-train", "demo.ftz", "demo-pruned-qnorm.ftz", "many-qout.ftz", "lid.176.ftz")


@pytest.mark.parametrize("kind", KINDS)
def test_each_real_models_size_is_what_its_header_implies(real_models, request, kind):
    """The header walk agrees with fastText itself (labels, dim, words, quantization) and ends at the file's last
    byte; the checked load returns the model."""
    import fasttext

    from tokenmill.classifier.model_file import read_model_file

    path = request.getfixturevalue("qout_model") if kind == "many-qout.ftz" else real_models[kind]
    info = read_model_file(path)
    model = fasttext.load_model(str(path))
    assert info.bytes == path.stat().st_size
    assert list(info.labels) == model.get_labels() and info.dim == model.get_dimension()
    assert info.words == len(model.get_words()) and info.quantized == model.is_quantized()
    assert f"loss_name.{info.loss}" == str(model.f.getArgs().loss)
    assert load_model(str(path)).get_labels() == model.get_labels()


def _cut_to_1mb(data: bytes) -> bytes:
    return data[:min(1_000_000, len(data) // 2)]


def _dim_plus_one(data: bytes) -> bytes:
    (dim,) = struct.unpack_from("<i", data, 8)
    return data[:8] + struct.pack("<i", dim + 1) + data[12:]


def _labels_plus_one(data: bytes) -> bytes:  # the dictionary's label count, after magic, version and the args
    (labels,) = struct.unpack_from("<i", data, 72)
    return data[:72] + struct.pack("<i", labels + 1) + data[76:]


DAMAGES = {
    "the first 1 MB only": (_cut_to_1mb, "is cut short"),
    "the last 100 bytes missing": (lambda data: data[:-100], "is cut short"),
    "one byte appended": (lambda data: data + b"\0", "1 byte too many"),
    "dim in the header off by one": (_dim_plus_one, ""),
    "the label count off by one": (_labels_plus_one, ""),
    "a version from the future": (lambda data: data[:4] + struct.pack("<i", 13) + data[8:], ""),
}


@pytest.mark.parametrize("kind", ("demo", "quality-train", "demo.ftz", "lid.176.ftz"))
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_model_is_refused_naming_the_file(real_models, tmp_path, kind, damage):
    """Issue 31: the demo's model with only its first 1 MB, or without its last 100 bytes, loaded, passed the label
    check and scored every text near 0. Each damage of each real file is now refused before fastText reads it."""
    edit, message = DAMAGES[damage]
    path = tmp_path / real_models[kind].name
    path.write_bytes(edit(real_models[kind].read_bytes()))
    with pytest.raises(ConfigError) as err:
        load_model(str(path))
    assert str(path) in str(err.value) and message in str(err.value), str(err.value)


def test_a_cut_model_says_how_many_bytes_it_has_and_should_have(real_models, tmp_path):
    data = real_models["demo"].read_bytes()
    path = tmp_path / "model.bin"
    path.write_bytes(data[:1_000_000])
    with pytest.raises(ConfigError, match=rf"has 1,000,000 bytes, and its header \(dim 8, .*\) implies "
                                          rf"{len(data):,} \({len(data) - 1_000_000:,} bytes missing\)"):
        load_model(str(path))


def test_weights_that_are_not_finite_are_refused(real_models, tmp_path):
    """A NaN where a weight should be (training stops on one, so fastText never writes it)."""
    data = bytearray(real_models["demo"].read_bytes())
    data[-4:] = struct.pack("<f", float("nan"))
    path = tmp_path / "model.bin"
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match="output matrix holds a weight that is not a finite number"):
        load_model(str(path))


def test_a_model_that_cannot_score_fails_its_self_test(real_models, tmp_path):
    """Weights at float32's edge are finite and the file whole, but every score overflows: fastText stops on a NaN
    for the first probe text, and the model is refused before a document meets it."""
    import fasttext

    from tokenmill.classifier.model_file import read_model_file

    source = real_models["demo"]
    info = read_model_file(source)
    data = bytearray(source.read_bytes())
    weights = len(info.labels) * info.dim  # the output matrix ends the file
    data[-4 * weights:] = struct.pack(f"<{weights}f", *([3e38, -3e38] * (weights // 2)))
    path = tmp_path / "model.bin"
    path.write_bytes(bytes(data))
    with pytest.raises(RuntimeError):  # what fastText does with it
        fasttext.load_model(str(path)).predict("the")
    with pytest.raises(ConfigError, match="fails its self-test: fastText stopped scoring the probe texts"):
        load_model(str(path))


class _Predicts:
    """A model whose predictions the self-test judges."""

    def __init__(self, labels, probabilities):
        self.answer = labels, probabilities

    def predict(self, texts, k, threshold):
        labels, probabilities = self.answer
        return [labels] * len(texts), [np.array(probabilities)] * len(texts)


@pytest.mark.parametrize("labels, probabilities, loss, message", [
    (["__label__hq"], [1.0], "softmax", "1 labels, not the model's 2"),
    (["__label__hq", "__label__lq"], [0.7, float("nan")], "softmax", "probabilities outside [0, 1]"),
    (["__label__hq", "__label__lq"], [0.7, 1.5], "ova", "probabilities outside [0, 1]"),
    (["__label__hq", "__label__lq"], [0.7, 0.7], "softmax", "summing to 1.400000, not 1"),
])
def test_the_self_test_wants_a_probability_per_label(labels, probabilities, loss, message):
    from tokenmill.classifier.fasttext_model import self_test
    from tokenmill.classifier.model_file import ModelFile

    info = ModelFile("m.bin", 12, 8, loss, 100, 2, 10, ("__label__hq", "__label__lq"), False, 1000)
    with pytest.raises(ConfigError) as err:
        self_test(_Predicts(labels, probabilities), info)
    assert "m.bin fails its self-test" in str(err.value) and message in str(err.value)
    self_test(_Predicts(["__label__lq", "__label__hq"], [0.3, 0.70001]), info)  # fastText's +1e-5 passes
    self_test(_Predicts(["__label__lq", "__label__hq"], [0.9, 0.8]), replace(info, loss="ova"))  # no sum to 1


def test_a_binding_without_get_labels_is_named_with_its_repair(real_models, tmp_path, monkeypatch):
    """Not an AttributeError deep in a stage: the package to reinstall and the command."""
    module = fasttext_predict_module(tmp_path)
    monkeypatch.setitem(sys.modules, "fasttext", module)
    monkeypatch.setitem(sys.modules, "fasttext_pybind", module.binding)
    with pytest.raises(Exception) as err:
        load_model(str(real_models["demo"]))
    assert not isinstance(err.value, AttributeError)
    assert "has no train_supervised, get_labels" in str(err.value)
    assert "pip install --force-reinstall --no-deps 'fasttext-numpy2==0.10.4'" in str(err.value)
