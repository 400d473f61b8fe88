"""A fastText model is checked before any text is scored: its size against what its header implies, its labels, a
self-test. On real files (the demo's model, a `quality train` model, quantized ones, the lid.176.ftz that language
identification loads), each cut short, padded or with a damaged header: refused, naming the file."""

from __future__ import annotations

import platform
import random
import signal
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.classifier.bindings import fasttext_predict_module
from tests.stages.clean.classifier_model import train_tiny
from tokenmill.errors import ConfigError
from tokenmill.fasttext.binding import load_model
from tokenmill.text import langid


@pytest.fixture(scope="module")
def real_models(tmp_path_factory, demo_corpus) -> dict[str, Path]:
    """Every kind of fastText file tokenmill meets, made by fastText itself."""
    import fasttext

    root = tmp_path_factory.mktemp("models")
    demo = demo_corpus / "quality" / "model.bin"  # trained by `tokenmill demo-data` (tests/conftest.py), read only
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

    from tokenmill.fasttext.model_file import read_model_file

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


ARGUMENTS = {"version": 4, "wordNgrams": 28, "bucket": 40, "minn": 44, "maxn": 48}
"""Where an int32 of the header lies: the version after the magic, then fastText's arguments from byte 8."""


def _header(data: bytes, **values: int) -> bytes:
    """`data` with some int32 of its header changed (the rest of the file as it was)."""
    out = bytearray(data)
    for name, value in values.items():
        out[ARGUMENTS[name]:ARGUMENTS[name] + 4] = struct.pack("<i", value)
    return bytes(out)


def _entries(data: bytes) -> list[tuple[int, int]]:
    """(first byte, NUL) of each dictionary entry: a word's bytes, NUL, int64 count, int8 type."""
    (size,) = struct.unpack_from("<i", data, 64)
    at, out = 92, []  # the dictionary's entries follow its three int32 and two int64 counts, from byte 64
    for _ in range(size):
        end = data.index(b"\0", at)
        out.append((at, end))
        at = end + 10
    return out


def _first_label_counted(count: int):
    def edit(data: bytes) -> bytes:
        (words,) = struct.unpack_from("<i", data, 68)
        _, end = _entries(data)[words]
        return data[:end + 1] + struct.pack("<q", count) + data[end + 9:]
    return edit


def _first_word_long(length: int):
    def edit(data: bytes) -> bytes:  # the dictionary is as long as its words: the rest of the file still adds up
        start, end = _entries(data)[0]
        return data[:start] + b"w" * length + data[end:]
    return edit


DAMAGES = {
    "the first 1 MB only": (_cut_to_1mb, "is cut short"),
    "the last 100 bytes missing": (lambda data: data[:-100], "is cut short"),
    "one byte appended": (lambda data: data + b"\0", "1 byte too many"),
    "dim in the header off by one": (_dim_plus_one, ""),
    "the label count off by one": (_labels_plus_one, ""),
    "a version from the future": (lambda data: data[:4] + struct.pack("<i", 13) + data[8:], ""),
    # Each of these, left to fastText, crashes or hangs the process on one of the files (tests below)
    "bucket 0 with character n-grams": (lambda data: _header(data, bucket=0, minn=2, maxn=4),
                                        "its bucket is 0 while it hashes character n-grams (maxn 4, wordNgrams"),
    "maxn 1,000,000": (lambda data: _header(data, maxn=1_000_000), "its maxn is 1000000"),
    "a label counted 10^15 times": (_first_label_counted(10**15), "has the count 1,000,000,000,000,000"),
    "a word of 1 MiB and a byte": (_first_word_long((1 << 20) + 1), "dictionary entry 1 of"),
}


@pytest.mark.parametrize("kind", ("demo", "quality-train", "demo.ftz", "lid.176.ftz"))
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_model_is_refused_naming_the_file(real_models, tmp_path, kind, damage):
    """Issue 31: the demo's model with only its first 1 MB, or without its last 100 bytes, loaded, passed the label
    check and scored every text near 0. Each damage of each real file is now refused before fastText reads it:
    the file check alone first, as some of them would kill or hang this process inside fastText."""
    from tokenmill.fasttext.model_file import read_model_file

    edit, message = DAMAGES[damage]
    path = tmp_path / real_models[kind].name
    path.write_bytes(edit(real_models[kind].read_bytes()))
    with pytest.raises(ConfigError) as err:
        read_model_file(path)
    assert str(path) in str(err.value) and message in str(err.value), str(err.value)
    with pytest.raises(ConfigError) as err:
        load_model(str(path))
    assert str(path) in str(err.value) and message in str(err.value), str(err.value)


@pytest.fixture(scope="module")
def unhashed_model(tmp_path_factory) -> Path:
    """A model fastText wrote with bucket 0: it sets bucket to 0 itself when nothing is hashed (wordNgrams 1, no
    character n-grams, as in `fasttext supervised`'s defaults)."""
    from tokenmill.classifier.fit import fit

    root = tmp_path_factory.mktemp("unhashed")
    rng = random.Random(0)
    (root / "train.txt").write_text("".join(f"__label__{c} " + " ".join(f"{c}{rng.randrange(9)}" for _ in range(5))
                                            + "\n" for c in rng.choices(("hq", "lq"), k=400)))
    fit(root / "train.txt", root / "model.bin", {"dim": 4, "epoch": 2, "wordNgrams": 1, "thread": 1, "verbose": 0})
    return root / "model.bin"


def _fasttext_alone(path: Path) -> subprocess.CompletedProcess:
    """fastText itself loading `path` and scoring a text, in a process of its own: it may die there."""
    script = "import fasttext, sys; fasttext.load_model(sys.argv[1]).predict('the cat sat on the mat')"
    return subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60)


SIGFPE_TRAPS = platform.machine() in ("x86_64", "AMD64", "i386", "i686")
"""An integer division by zero raises SIGFPE on x86; on ARM it quietly gives 0."""


def test_fasttexts_own_bucket_0_is_taken_and_one_that_would_crash_fasttext_is_refused(unhashed_model, real_models,
                                                                                     tmp_path):
    """fastText's rule (args.cc): bucket 0 only when nothing is hashed. A header asking for character n-grams or
    word bigrams with bucket 0 passed the file check, and fastText computed `hash % 0`: SIGFPE, exit 136, at load
    (character n-grams of every dictionary word) or at the first prediction (word bigrams). Refused now, before
    fastText reads it; what fastText does with each file is run in a process of its own."""
    from tokenmill.fasttext.model_file import read_model_file

    data = unhashed_model.read_bytes()
    assert read_model_file(unhashed_model).bucket == 0 and load_model(str(unhashed_model)).get_labels()
    # fastText loads a version-11 classifier without character n-grams whatever maxn says: taken too
    old = tmp_path / "v11.bin"
    old.write_bytes(_header(data, version=11, minn=2, maxn=4))
    assert read_model_file(old).bucket == 0 and _fasttext_alone(old).returncode == 0
    crashing = {"unhashed-ngrams.bin": (_header(data, minn=2, maxn=4), "it hashes character n-grams (maxn 4"),
                "unhashed-bigrams.bin": (_header(data, wordNgrams=2), "it hashes word n-grams (maxn 0, wordNgrams 2"),
                "lid-unhashed.ftz": (_header(real_models["lid.176.ftz"].read_bytes(), bucket=0), "character n-grams")}
    for name, (content, message) in crashing.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ConfigError, match=r"its bucket is 0 while .*fastText would divide by zero") as err:
            read_model_file(path)
        assert str(path) in str(err.value) and message in str(err.value), str(err.value)
        if SIGFPE_TRAPS:
            assert _fasttext_alone(path).returncode == -signal.SIGFPE, name


@pytest.mark.parametrize("fields, message", [
    ({"minn": 5, "maxn": 3}, "its minn 5 is above its maxn 3"),
    ({"maxn": 13}, "its maxn is 13: character n-grams longer than 12"),
    ({"wordNgrams": 13}, "wordNgrams 13"),
    ({"wordNgrams": 0}, "wordNgrams 0"),
    ({"bucket": -1}, "bucket -1"),
])
def test_arguments_beyond_what_fasttext_writes_are_refused(real_models, tmp_path, fields, message):
    from tokenmill.fasttext.model_file import read_model_file

    path = tmp_path / "model.ftz"
    path.write_bytes(_header(real_models["lid.176.ftz"].read_bytes(), **fields))
    with pytest.raises(ConfigError) as err:
        read_model_file(path)
    assert str(path) in str(err.value) and message in str(err.value), str(err.value)


def test_a_pruned_index_pointing_past_the_input_matrix_is_refused(real_models, tmp_path):
    """A quantized model's pruned index maps a hash bucket to one of the rows kept: a row past them made fastText read
    outside its input matrix at the first prediction (SIGSEGV, exit 139, on lid.176.ftz)."""
    from tokenmill.fasttext.model_file import read_model_file

    data = bytearray(real_models["lid.176.ftz"].read_bytes())
    (pruned,) = struct.unpack_from("<q", data, 84)
    _, end = _entries(bytes(data))[-1]
    index = end + 10
    key, row = struct.unpack_from("<2i", data, index)
    assert 0 <= row < pruned  # as fastText wrote it
    data[index + 4:index + 8] = struct.pack("<i", pruned)
    path = tmp_path / "lid.176.ftz"
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=f"its pruned index maps bucket {key} to row {pruned}, outside"):
        read_model_file(path)


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

    from tokenmill.fasttext.model_file import read_model_file

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
    from tokenmill.fasttext.binding import self_test
    from tokenmill.fasttext.model_file import ModelFile

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
