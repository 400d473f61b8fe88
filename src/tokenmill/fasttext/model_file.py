"""THE fastText model file format, read only as far as checking a file needs: its header, labels and true size.

fastText loads a model with plain `istream.read`s and never looks at what it read (`fasttext.cc: loadModel`): a file
cut short loads, its missing weights left at zero, and scores every text near one value; bytes past the end are
ignored; a damaged count makes it allocate whatever the count says. So tokenmill reads the file's own description
of itself first, without fastText, and refuses it unless the file holds exactly what that description implies.

The layout (fastText's `fasttext.cc` saveModel, `args.cc`, `dictionary.cc`, `densematrix.cc`, `quantmatrix.cc`,
`productquantizer.cc`; little-endian, no padding):

    int32 magic 793712314, int32 version (11 or 12)
    args: int32 dim, ws, epoch, minCount, neg, wordNgrams, loss, model, bucket, minn, maxn, lrUpdateRate; float64 t
    dictionary: int32 size, nwords, nlabels; int64 ntokens, pruneidx_size;
        size x (the word's bytes, NUL, int64 count, int8 type: 0 word, 1 label), the words before the labels;
        max(pruneidx_size, 0) x (int32, int32)
    bool quant_input, then the input matrix (quantized if quant_input, else dense)
    bool qout, then the output matrix (quantized if quant_input and qout, else dense)
    dense: int64 m, n; m x n float32
    quantized: bool qnorm; int64 m, n; int32 codesize; codesize x uint8; a product quantizer;
        if qnorm: m x uint8 and a second product quantizer
    product quantizer: int32 dim, nsubq, dsub, lastdsub; dim x 256 float32 centroids

fastText also trusts the arguments and the dictionary with its process: loading a file whose `bucket` is 0 while
`maxn` asks for character n-grams computes `hash % 0` for every word (SIGFPE: the process dies, exit 136), and with
`wordNgrams` above 1 every prediction does; `maxn` has no bound in fastText, and each dictionary word costs about
`len x min(len, maxn)^2` steps at load (a 10 kB word with `maxn` 1,000,000 never finishes); a label count of 10^15
or more hangs the load of a hierarchical-softmax model (its Huffman tree takes it for a node not built yet); a
pruned index pointing past the input matrix makes a prediction read outside it (SIGSEGV). So the arguments, the
counts and the pruned index are held to what fastText itself writes (`_arguments`, `_dictionary`, `_pruned_index`).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenmill.errors import ConfigError

MAGIC = 793712314
"""fastText's `FASTTEXT_FILEFORMAT_MAGIC_INT32`, the file's first four bytes."""
VERSIONS = (11, 12)
"""The format versions fastText has written (`FASTTEXT_VERSION` is 12; 11 is the first with the magic)."""
LOSSES = {1: "hs", 2: "ns", 3: "softmax", 4: "ova"}
"""fastText's `loss_name` values."""
SUPERVISED = 3
"""fastText's `model_name::sup`: a classifier (1 and 2 are cbow and skipgram word vectors)."""
_ARGS = struct.Struct("<12id")
_DICT = struct.Struct("<3i2q")
_DENSE = struct.Struct("<2q")
_QUANT = struct.Struct("<?2qi")
_PQ = struct.Struct("<4i")
_KSUB = 256
"""Centroids per sub-quantizer (`ProductQuantizer::ksub_`, 1 << 8)."""
MAX_NGRAM = 12
"""The longest character n-gram (`maxn`) and word n-gram (`wordNgrams`) a model may use: twice what fastText ever
picks (its defaults: `maxn` 6 for word vectors, 0 for classifiers; its autotune: `maxn` up to 6; lid.176: 4), and
small enough that a word costs at most 78 steps per byte at load and a text 12 hashes per word at prediction."""
MAX_WORD_BYTES = 1 << 20
"""The longest dictionary word or label, in bytes (1 MiB): longer than any whitespace-free run of real text (a
base64 image of 700 kB), and a bound on the subword ids fastText keeps per word (at most 4 x `maxn` per byte)."""
MAX_COUNT = 10**15
"""A dictionary entry's count must be below this: fastText's hierarchical softmax starts every node of its Huffman
tree at this count (`HierarchicalSoftmaxLoss::buildTree`), and a label counted that often hangs the load. No
corpus holds a word 10^15 times."""
_SCAN_FLOATS = 1 << 24
"""float32 weights checked per step of the finiteness scan (64 MB)."""


class ModelFileError(ConfigError):
    """A file that is not a whole fastText classifier: not fastText's format, cut short, padded, or damaged."""


@dataclass(frozen=True)
class ModelFile:
    """What a fastText model file says of itself, each part checked against the file."""

    path: str
    version: int
    dim: int
    loss: str
    """`softmax`, `hs`, `ns` or `ova`."""
    bucket: int
    word_ngrams: int
    words: int
    labels: tuple[str, ...]
    """The labels in the model's order (what `get_labels()` returns)."""
    quantized: bool
    """An `.ftz` (`model.quantize()`): the input matrix, and maybe the output, product-quantized."""
    bytes: int
    """The file's size, which is exactly what the header implies."""


def read_model_file(path: str | Path, weights: bool = True) -> ModelFile:
    """The description of the fastText model at `path`, after checking that the file is exactly what it describes
    (magic, version, a supervised model, arguments fastText can compute with, a dictionary whose counts add up,
    matrices shaped as the dictionary and `dim` require, every weight finite, and the file's size to the byte).
    Raises ModelFileError naming the file, what is wrong and what to do; reads no more than the file
    (memory-mapped) and allocates nothing it says.

    `weights=False` leaves out the one check that reads the whole file, that every weight is finite: for bytes
    that passed it already (`check_marker.py`: a worker loading the model its driver checked)."""
    path = str(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise ModelFileError(f"{path} is empty (0 bytes), not a fastText model: copy the model again")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _Reader(path, data, size, weights).read()
    except OSError as err:
        raise ModelFileError(f"cannot read fastText model {path}: {err.strerror or err}") from None


class _Truncated(Exception):
    """Raised inside the reader when a part of the model would pass the end of the file."""

    def __init__(self, part: str, needed: int | None):
        self.part, self.needed = part, needed


class _Reader:
    """One pass over the mapped file, in fastText's load order."""

    def __init__(self, path: str, data: mmap.mmap, size: int, weights: bool = True):
        self.path, self.data, self.size, self.pos = path, data, size, 0
        self.weights = weights

    def fail(self, what: str) -> ModelFileError:
        return ModelFileError(f"{self.path} is not a usable fastText model: {what}. It may be damaged or not a "
                              f"fastText classifier: copy it again from its source, or retrain it")

    def unpack(self, fmt: struct.Struct, part: str) -> tuple:
        self.skip(fmt.size, part)
        return fmt.unpack_from(self.data, self.pos - fmt.size)

    def skip(self, count: int, part: str) -> int:
        """Step over the `count` bytes of `part`; returns where they start."""
        start = self.pos
        self.pos += count
        if self.pos > self.size:
            raise _Truncated(part, self.pos)
        return start

    def read(self) -> ModelFile:
        try:
            return self._read()
        except _Truncated as cut:
            at_least = "" if cut.needed is None else f", and its parts up to there take at least {cut.needed:,}"
            raise ModelFileError(
                f"{self.path} is cut short: it ends at byte {self.size:,}, inside the model's {cut.part}{at_least} "
                f"(an interrupted copy or download?): copy the whole file again") from None

    def _read(self) -> ModelFile:
        if self.size < 8:
            raise self.fail(f"it has only {self.size} bytes")
        magic, version = struct.unpack_from("<2i", self.data, 0)
        self.pos = 8
        if magic != MAGIC:
            raise self.fail(f"it starts with {bytes(self.data[:4])!r}, not fastText's magic number {MAGIC} "
                            f"({struct.pack('<i', MAGIC)!r})")
        if version not in VERSIONS:
            raise self.fail(f"its format version is {version}; fastText writes {' or '.join(map(str, VERSIONS))}")
        (dim, _ws, _epoch, _min_count, _neg, word_ngrams, loss, model, bucket, minn, maxn, _lr_update,
         _t) = self.unpack(_ARGS, "arguments")
        if model != SUPERVISED:
            raise self.fail(f"it is a word-vector model (fastText model type {model}), not a classifier "
                            f"(`fasttext supervised`, type {SUPERVISED})")
        if loss not in LOSSES:
            raise self.fail(f"its loss is {loss}, which is none of fastText's ({', '.join(map(str, LOSSES))})")
        self._arguments(version, dim, bucket, word_ngrams, minn, maxn)
        labels, words, pruned = self._dictionary(bucket)
        quantized = self._flag("flag of a quantized input matrix")
        if not quantized:
            if pruned >= 0:  # fastText itself refuses this ("Invalid model file", its issue #332)
                raise self.fail("its dictionary is pruned but its input matrix is not quantized")
            # Both matrices dense: the header and the dictionary fix the size, whatever the rest of the file holds.
            rows = words + bucket
            self._check_size(self.pos + (16 + 4 * rows * dim) + 1 + (16 + 4 * len(labels) * dim),
                             f"dim {dim}, {words:,} words, {bucket:,} buckets, {len(labels):,} labels")
            self._dense("input matrix", rows, dim)
            self._flag("flag of a quantized output matrix")  # read and ignored by fastText for a dense input
            self._dense("output matrix", len(labels), dim)
        else:
            self._quantized("input matrix", words + pruned if pruned >= 0 else words + bucket, dim)
            if self._flag("flag of a quantized output matrix"):
                self._quantized("output matrix", len(labels), dim)
            else:
                self._dense("output matrix", len(labels), dim)
            self._check_size(self.pos, "quantized")
        return ModelFile(self.path, version, dim, LOSSES[loss], bucket, word_ngrams, words, tuple(labels),
                         quantized, self.size)

    def _arguments(self, version: int, dim: int, bucket: int, word_ngrams: int, minn: int, maxn: int) -> None:
        """The arguments fastText computes with at load and prediction, within what fastText itself writes."""
        if dim < 1 or bucket < 0 or minn < 0 or maxn < 0 or not 1 <= word_ngrams <= MAX_NGRAM:
            raise self.fail(f"its arguments are out of range (dim {dim}, bucket {bucket}, wordNgrams {word_ngrams}, "
                            f"minn {minn}, maxn {maxn}; fastText writes dim and wordNgrams from 1, and tokenmill "
                            f"takes wordNgrams up to {MAX_NGRAM})")
        if version == 11:  # fastText loads a version-11 classifier without character n-grams, whatever maxn says
            maxn = 0
        if maxn > MAX_NGRAM:
            raise self.fail(f"its maxn is {maxn}: character n-grams longer than {MAX_NGRAM} are not taken (fastText "
                            f"spends about length x maxn^2 steps on each word at load, and never finishes on a long "
                            f"one)")
        if maxn > 0 and minn > maxn:
            raise self.fail(f"its minn {minn} is above its maxn {maxn}: it would use no character n-gram")
        if bucket == 0 and (maxn > 0 or word_ngrams > 1):
            # fastText sets bucket to 0 only when nothing is hashed (args.cc); else `hash % bucket` kills the process
            raise self.fail(f"its bucket is 0 while it hashes {'character' if maxn > 0 else 'word'} n-grams "
                            f"(maxn {maxn}, wordNgrams {word_ngrams}): fastText would divide by zero and crash")

    def _check_size(self, expected: int, header: str) -> None:
        if expected != self.size:
            how = "cut short" if expected > self.size else "longer than fastText wrote it"
            raise ModelFileError(
                f"{self.path} is {how}: it has {self.size:,} bytes, and its header ({header}) implies {expected:,} "
                f"({_difference(self.size - expected)}): an interrupted or damaged copy; copy the whole file again")

    def _dictionary(self, bucket: int) -> tuple[list[str], int, int]:
        """The labels, the number of words and `pruneidx_size` (-1: not pruned)."""
        size, words, nlabels, _tokens, pruned = self.unpack(_DICT, "dictionary")
        if words < 0 or nlabels < 1 or size != words + nlabels:
            raise self.fail(f"its dictionary counts do not add up ({size} entries, {words} words, {nlabels} labels)")
        if pruned < -1:
            raise self.fail(f"its dictionary's pruned size is {pruned}")
        if self.pos + 10 * size > self.size:  # each entry takes at least 10 bytes
            raise _Truncated(f"dictionary ({size:,} entries)", self.pos + 10 * size)
        labels: list[str] = []
        for i in range(size):
            end = self.data.find(b"\0", self.pos)
            if end < 0 or end + 10 > self.size:
                raise _Truncated(f"dictionary (entry {i + 1:,} of {size:,})", None)
            if end == self.pos:  # fastText never stores an empty word: zeros where the dictionary should be
                raise self.fail(f"dictionary entry {i + 1:,} of {size:,} is empty")
            if end - self.pos > MAX_WORD_BYTES:
                raise self.fail(f"dictionary entry {i + 1:,} of {size:,} is {end - self.pos:,} bytes long, more than "
                                f"the {MAX_WORD_BYTES:,} tokenmill takes")
            (count,) = struct.unpack_from("<q", self.data, end + 1)
            if not 0 <= count < MAX_COUNT:
                raise self.fail(f"dictionary entry {i + 1:,} of {size:,} has the count {count:,}")
            kind = self.data[end + 9]  # after the NUL and the int64 count
            if kind != (0 if i < words else 1):
                raise self.fail(f"dictionary entry {i + 1:,} of {size:,} has type {kind}; the {words:,} words come "
                                f"first, then the {nlabels:,} labels")
            if kind == 1:
                word = self.data[self.pos:end]
                try:
                    labels.append(word.decode("utf-8"))
                except UnicodeDecodeError:
                    raise self.fail(f"its label {i - words + 1} is not UTF-8 ({word[:40]!r})") from None
            self.pos = end + 10
        if pruned > 0:
            self._pruned_index(pruned, bucket)
        return labels, words, pruned

    def _pruned_index(self, pruned: int, bucket: int) -> None:
        """A quantized model's map from hash bucket to its row among the `pruned` n-gram rows kept
        (`Dictionary::prune`): a row past them would be read from outside the input matrix at prediction."""
        start = self.skip(8 * pruned, "dictionary's pruned index")
        pairs = np.frombuffer(self.data, dtype="<i4", count=2 * pruned, offset=start).reshape(pruned, 2)
        bad = np.flatnonzero((pairs[:, 0] < 0) | (pairs[:, 0] >= bucket) | (pairs[:, 1] < 0) | (pairs[:, 1] >= pruned))
        if bad.size:
            key, row = (int(v) for v in pairs[bad[0]])
            del pairs  # a view of the map, which must close when this raises
            raise self.fail(f"its pruned index maps bucket {key} to row {row}, outside its {bucket:,} buckets and "
                            f"{pruned:,} rows")

    def _flag(self, part: str) -> bool:
        (value,) = self.unpack(struct.Struct("<B"), part)
        if value > 1:
            raise self.fail(f"{part} is {value}, not 0 or 1")
        return bool(value)

    def _dense(self, part: str, rows: int, dim: int) -> None:
        m, n = self.unpack(_DENSE, f"{part}'s shape")
        if (m, n) != (rows, dim):
            raise self.fail(f"its {part} is {m} x {n}; the dictionary and dim imply {rows} x {dim}")
        self._floats(self.skip(4 * m * n, part), m * n, part)

    def _quantized(self, part: str, rows: int, dim: int) -> None:
        qnorm, m, n, codesize = self.unpack(_QUANT, f"{part}'s shape")
        if (m, n) != (rows, dim):
            raise self.fail(f"its quantized {part} is {m} x {n}; the dictionary and dim imply {rows} x {dim}")
        self.skip(codesize, f"{part}'s codes")
        subquantizers = self._product_quantizer(part, n)
        if codesize != m * subquantizers:
            raise self.fail(f"its quantized {part} has {codesize} codes, not {m} rows x {subquantizers}")
        if qnorm:
            self.skip(m, f"{part}'s norm codes")
            self._product_quantizer(f"{part}'s norms", 1)

    def _product_quantizer(self, part: str, dim: int) -> int:
        """Reads one product quantizer of vectors of `dim`; returns its number of sub-quantizers."""
        pq_dim, nsubq, dsub, last = self.unpack(_PQ, f"{part}'s quantizer")
        if pq_dim != dim or dsub < 1 or nsubq != -(-dim // dsub) or last != (dim % dsub or dsub):
            raise self.fail(f"its {part}'s quantizer (dim {pq_dim}, {nsubq} x {dsub}, last {last}) does not fit "
                            f"vectors of {dim}")
        self._floats(self.skip(4 * dim * _KSUB, f"{part}'s centroids"), dim * _KSUB, f"{part}'s centroids")
        return nsubq

    def _floats(self, start: int, count: int, part: str) -> None:
        """Every float32 of `part` must be finite: training stops on a NaN, so a model fastText wrote has none."""
        if not self.weights:
            return
        end = start + 4 * count
        for at in range(start, end, 4 * _SCAN_FLOATS):
            chunk = np.frombuffer(self.data, dtype="<f4", count=min(_SCAN_FLOATS, (end - at) // 4), offset=at)
            finite = np.isfinite(chunk)
            del chunk  # a view of the map, which must close when this raises
            if not finite.all():
                bad = at + 4 * int(np.flatnonzero(~finite)[0])
                raise self.fail(f"its {part} holds a weight that is not a finite number (at byte {bad:,})")


def _difference(delta: int) -> str:
    count = f"{abs(delta):,} byte{'s' if abs(delta) != 1 else ''}"
    return f"{count} missing" if delta < 0 else f"{count} too many"
