"""A checkpoint from someone else runs no code: DCP's ``.metadata`` admits exact (module, name) globals only.

The allow-list is checked against what real ``tokenmill train`` checkpoints hold (recorded with pickletools); a
generated family of gadgets (every callable reachable by attribute walk from each allowed module, spelled as a
protocol 4 dotted name through STACK_GLOBAL and GLOBAL, and by its own module and name through GLOBAL and INST) is
refused with nothing run; and a real run whose ``.metadata`` is replaced by the issue's gadget stops on resume naming
the file, the marker the gadget would write absent."""

from __future__ import annotations

import _compat_pickle
import copyreg
import dataclasses
import hashlib
import io
import json
import pickle
import pickletools
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

from tokenmill.cli import main
from tokenmill.train.checkpoint import MARKER
from tests.train.runs import config, write_config, write_tokens

METADATA_MODULE = "torch.distributed.checkpoint.metadata"
#: The gadget of issue 31: an allowed module, then a dotted name that protocol 4's find_class walks to a class.
POPEN = (METADATA_MODULE, "torch._strobelight.cli_function_profiler.subprocess.Popen")
#: What DCP writes for `tokenmill train` (torch 2.13, 1 and 2 ranks, AdamW state), recorded from real runs.
RECORDED = {
    (METADATA_MODULE, "Metadata"), (METADATA_MODULE, "MetadataIndex"), (METADATA_MODULE, "StorageMeta"),
    (METADATA_MODULE, "TensorStorageMetadata"), (METADATA_MODULE, "BytesStorageMetadata"),
    (METADATA_MODULE, "ChunkStorageMetadata"), (METADATA_MODULE, "TensorProperties"),
    (METADATA_MODULE, "_MEM_FORMAT_ENCODING"), ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"), ("torch", "float32"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"),
}
WALK_DEPTH = 5  # the gadget is 5 attributes deep from the metadata module


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return write_tokens(tmp_path_factory.mktemp("unpickle-tokens"))


@pytest.fixture(scope="module")
def family():
    return gadget_family()


def pickled_globals(data: bytes) -> set[tuple[str, str]]:
    """Every (module, name) a pickle names, read with pickletools (nothing imported): GLOBAL and INST carry the pair,
    STACK_GLOBAL takes the two strings last pushed or fetched from the memo."""
    found, memo, pushed = set(), {}, []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("GLOBAL", "INST"):
            found.add(tuple(arg.split(" ", 1)))
        elif op.name == "STACK_GLOBAL":
            found.add((pushed[-2], pushed[-1]))
        elif op.name in ("EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"):
            found.add((op.name, str(arg)))
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
            pushed.append(arg)
        elif op.name in ("BINGET", "LONG_BINGET", "GET"):
            pushed.append(memo.get(arg))
        elif op.name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif op.name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[arg] = pushed[-1] if pushed else None
        else:
            pushed.append(None)  # any other value: a STACK_GLOBAL takes two strings pushed just before it
    return found


def test_the_allow_list_is_what_a_real_run_writes_and_it_resumes(tokens, tmp_path, capsys):
    """A real 1-rank run's checkpoints name exactly the recorded globals, all allowed, and the run resumes through
    the allow-list. (2 ranks: the same set, recorded when the list was made; their resume through it is
    tests/train/test_trainer.py::test_two_processes_with_torchrun_then_resume_on_one_and_on_three.)"""
    from tokenmill.train.safe_unpickle import ALLOWED

    out = tmp_path / "run"
    path = write_config(tmp_path / "t.yaml", config(tokens, out, steps=2, checkpoint_every=2, eval_every=0,
                                                    warmup_steps=1))
    assert main(["train", str(path)]) == 0, capsys.readouterr().err
    named = pickled_globals((out / "checkpoints" / "step-000000002" / ".metadata").read_bytes())
    assert named == RECORDED
    assert RECORDED <= ALLOWED.keys()
    # Nothing beyond what was recorded, except other dtypes and Python 3.13's module for PosixPath.
    extra = {pair for pair in ALLOWED.keys() - RECORDED if pair[0] != "torch" or pair[1] == "Size"}
    assert extra == {("pathlib._local", "PosixPath")}
    assert main(["train", str(path), "--steps", "4"]) == 0, capsys.readouterr().err
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [(e["action"], e["step"]) for e in events] == [("resume", 2)]


# ---- the gadget family


def walk(root: object, depth: int = WALK_DEPTH) -> list[tuple[str, object]]:
    """Every callable reachable from ``root`` through modules' and classes' attributes (their ``__dict__``, so no
    property or lazy import runs), each once, by its shortest dotted path."""
    seen, frontier, found = {id(root)}, [("", root)], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance on deprecated aliases warns
        for _ in range(depth):
            deeper = []
            for path, obj in frontier:
                for key, value in list(vars(obj).items()):
                    if not isinstance(key, str) or id(value) in seen:
                        continue
                    seen.add(id(value))
                    dotted = f"{path}.{key}" if path else key
                    if isinstance(value, (types.ModuleType, type)):
                        deeper.append((dotted, value))
                    if callable(value):
                        found.append((dotted, value))
            frontier = deeper
    return found


def gadget_family() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(dotted pairs, home pairs): from each allowed module and each allowed object, every callable reachable by
    attribute walk, as (allowed module, dotted name); and each such callable by its own module and name, and by its
    Python 2 spelling where it has one (``("commands", "Popen")``: below protocol 3 the standard ``find_class`` maps
    it back)."""
    from tokenmill.train.safe_unpickle import ALLOWED

    dotted: list[tuple[str, str]] = []
    homes: dict[tuple[str, str], None] = {}
    roots = [(module, sys.modules[module], "") for module in sorted({m for m, _ in ALLOWED}) if module in sys.modules]
    roots += [(module, obj if isinstance(obj, type) else type(obj), f"{name}.")
              for (module, name), obj in sorted(ALLOWED.items(), key=lambda kv: kv[0])]
    for module, root, prefix in roots:
        for path, obj in walk(root):
            dotted.append((module, prefix + path))
            home = (getattr(obj, "__module__", None), getattr(obj, "__qualname__", None))
            if all(isinstance(part, str) and part and "\n" not in part for part in home) and "<" not in home[1]:
                homes[home] = None
                py2 = _compat_pickle.REVERSE_NAME_MAPPING.get(home) or (
                    _compat_pickle.REVERSE_IMPORT_MAPPING.get(home[0], home[0]), home[1])
                homes[py2] = None
    allowed = ALLOWED.keys()
    return [p for p in dotted if p not in allowed], [p for p in homes if p not in allowed]


def _text(value: str) -> bytes:
    raw = value.encode()
    return (b"\x8c" + bytes([len(raw)]) + raw) if len(raw) < 256 else b"X" + len(raw).to_bytes(4, "little") + raw


def _items(values: tuple) -> bytes:
    """Each value as pickle opcodes (protocol 2: no frame), pushed one after another."""
    return b"".join(pickle.dumps(v, protocol=2)[2:-1] for v in values)


def _call(values: tuple) -> bytes:
    """MARK, the arguments, TUPLE, REDUCE, STOP: calls the global below with ``values``."""
    return b"(" + _items(values) + b"tR."


def stack_global(module: str, name: str, call: bytes) -> bytes:
    """Protocol 4: the names pushed as strings, then STACK_GLOBAL (which walks a dotted name); ``call``: ``_call``."""
    return b"\x80\x04" + _text(module) + _text(name) + b"\x93" + call


def protocol4_global(module: str, name: str, call: bytes) -> bytes:
    """GLOBAL under a protocol 4 header: a dotted name is walked as well."""
    return b"\x80\x04c" + module.encode() + b"\n" + name.encode() + b"\n" + call


def plain_global(module: str, name: str, call: bytes) -> bytes:
    """GLOBAL under a protocol 2 header: the module and a plain name, Python 2 names mapped to Python 3's."""
    return b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n" + call


def inst(module: str, name: str, call: bytes) -> bytes:
    """INST (protocol 0): MARK, the arguments, then the global, which is called with them."""
    return b"(" + call[1:-3] + b"i" + module.encode() + b"\n" + name.encode() + b"\n."  # the arguments of _call


def shell(marker: Path) -> bytes:
    """Call with a shell command that writes ``marker`` (os.system's argument)."""
    return _call((f"id > {marker}",))


def argv(marker: Path) -> bytes:
    """Call with an argv that writes ``marker`` (subprocess.Popen's argument)."""
    return _call((["sh", "-c", f"id > {marker}"],))


def test_the_gadget_builders_make_live_payloads(tmp_path, family):
    """Unpickled freely, the family's payloads run code: the dotted name reaches subprocess.Popen, the home pair
    os.system, the Python 2 spelling eval. So the refusals below are of working gadgets."""
    ran = tmp_path / "popen"
    child = pickle.loads(stack_global(*POPEN, argv(ran)))  # noqa: S301 - on purpose: the payload must be live
    child.wait()
    assert ran.stat().st_size > 0
    dotted, homes = family
    # The walk itself finds a way to Popen from every allowed module that imports torch, not just the issue's.
    reach = {module for module, name in dotted if name.endswith(".subprocess.Popen")}
    assert reach >= {METADATA_MODULE, "torch", "torch.serialization", "torch.distributed.checkpoint.filesystem"}
    assert ("subprocess", "Popen") in homes and ("posix", "system") in homes and ("builtins", "eval") in homes
    assert ("commands", "Popen") in homes and ("__builtin__", "eval") in homes  # Python 2's names for them
    ran = tmp_path / "py2"
    pickle.loads(plain_global("__builtin__", "eval", _call((f"__import__('os').system('id > {ran}')",))))  # noqa: S301
    assert ran.stat().st_size > 0
    for build in (plain_global, inst):
        ran = tmp_path / build.__name__
        pickle.loads(build("posix", "system", shell(ran)))  # noqa: S301 - on purpose
        assert ran.stat().st_size > 0


def test_every_gadget_of_the_family_is_refused_and_nothing_runs(tmp_path, family):
    """Each dotted pair through STACK_GLOBAL and GLOBAL under protocol 4, each home pair through plain GLOBAL and
    INST (about 370,000 pickles); each called with a shell command, the issue's Popen with an argv."""
    from tokenmill.train.safe_unpickle import RefusedGlobal, load_metadata

    ran = tmp_path / "ran"
    dotted, homes = family
    assert len(dotted) > 100_000 and len(homes) > 10_000  # the walk reached the whole of torch
    call, popen_call = shell(ran), argv(ran)
    payloads = [(dotted, (stack_global, protocol4_global), call), (homes, (plain_global, inst), call),
                ([POPEN], (stack_global, protocol4_global), popen_call)]  # the last: the issue's own, as it ran
    let_through = []
    for pairs, builds, args in payloads:
        for build in builds:
            for module, name in pairs:
                try:
                    load_metadata(io.BytesIO(build(module, name, args)), "gadget.metadata")
                except RefusedGlobal as e:
                    if (e.module, e.name, e.source) != (module, name, "gadget.metadata"):
                        let_through.append((module, name, build.__name__, str(e)))
                else:
                    let_through.append((module, name, build.__name__))
    assert not let_through
    assert not ran.exists()


def test_an_extension_code_for_a_global_is_refused(tmp_path):
    """EXT1: a global named through copyreg's registry reaches find_class too (the registry is empty unless a
    library fills it)."""
    from tokenmill.train.safe_unpickle import RefusedGlobal, load_metadata

    ran = tmp_path / "ran"
    copyreg.add_extension("posix", "system", 0xF0)
    try:
        with pytest.raises(RefusedGlobal, match=r"\('posix', 'system'\)"):
            load_metadata(io.BytesIO(b"\x80\x02\x82\xf0" + shell(ran)), "ext.metadata")
    finally:
        copyreg.remove_extension("posix", "system", 0xF0)
    assert not ran.exists()


def test_a_refusal_survives_the_trip_to_another_rank():
    """DCP sends a rank's failure to the others pickled: the refusal must arrive as itself, or the ranks would fall
    back to an older checkpoint instead of stopping."""
    from tokenmill.train.checkpoint import _RefusedValue
    from tokenmill.train.safe_unpickle import RefusedGlobal

    for err in (RefusedGlobal("a/.metadata", "posix", "system"), _RefusedValue("__1_0.distcp", "k", "why")):
        back = pickle.loads(pickle.dumps(err))  # noqa: S301 - our own exception, as torch's collectives move it
        assert type(back) is type(err) and str(back) == str(err) and vars(back) == vars(err)


def test_persistent_ids_and_other_objects_are_refused():
    from tokenmill.train.safe_unpickle import load_metadata

    with pytest.raises(pickle.UnpicklingError, match="persistent id"):
        load_metadata(io.BytesIO(b"\x80\x02X\x01\x00\x00\x00xQ."), "p.metadata")
    with pytest.raises(pickle.UnpicklingError, match="holds a dict, not DCP's Metadata"):
        load_metadata(io.BytesIO(pickle.dumps({"a": 1})), "d.metadata")


# ---- end to end: a real checkpoint, its .metadata replaced by the gadget, resumed by `tokenmill train`


def recommit(checkpoint: Path, *names: str) -> None:
    """Record the size and sha256 of the named files in ``COMMITTED``, as whoever hands over a checkpoint can."""
    marker = json.loads((checkpoint / MARKER).read_text())
    for name in names:
        data = (checkpoint / name).read_bytes()
        marker["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (checkpoint / MARKER).write_text(json.dumps(marker))


def plant(checkpoint: Path, data: bytes) -> Path:
    """Replace a checkpoint's ``.metadata`` with ``data``, ``COMMITTED`` updated."""
    target = checkpoint / ".metadata"
    target.write_bytes(data)
    recommit(checkpoint, ".metadata")
    return target


def test_a_run_resumed_from_a_gadget_checkpoint_stops_naming_the_file_and_runs_nothing(tokens, tmp_path, capsys):
    out = tmp_path / "run"
    path = write_config(tmp_path / "t.yaml", config(tokens, out, steps=4, checkpoint_every=2, eval_every=0))
    assert main(["train", str(path)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    ran = tmp_path / "MARKER"
    newest = out / "checkpoints" / "step-000000004"
    target = plant(newest, stack_global(*POPEN, argv(ran)))
    assert main(["train", str(path), "--steps", "6"]) == 2
    said = "".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert not ran.exists()
    expected = (f"error: checkpoint {newest} is not safe to load: {target} names the Python global {POPEN!r}, "
                "which DCP never writes; it was refused and nothing in the file was run")
    assert "".join(expected.split()) in said
    assert "Traceback" not in said
    assert not (out / "checkpoints" / "step-000000006").exists()  # it did not fall back and train on


@pytest.mark.slow  # two ranks, launched twice: about 35 s on two busy cores
def test_two_ranks_resumed_from_a_gadget_checkpoint_both_stop(tokens, tmp_path):
    """Two FSDP ranks write the recorded pairs; resumed from the gadget, every rank stops with the refusal (rank 0
    verifies and broadcasts the verdict) and nothing runs."""
    out = tmp_path / "run"
    path = write_config(tmp_path / "t.yaml", config(tokens, out, steps=2, checkpoint_every=2, eval_every=0,
                                                    warmup_steps=1))
    cmd = [sys.executable, "-m", "tokenmill.cli", "train", str(path), "--nproc", "2"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    checkpoint = out / "checkpoints" / "step-000000002"
    assert pickled_globals((checkpoint / ".metadata").read_bytes()) == RECORDED  # 2 ranks name the same pairs
    ran = tmp_path / "MARKER"
    target = plant(checkpoint, stack_global(*POPEN, argv(ran)))
    resumed = subprocess.run([*cmd, "--steps", "4"], capture_output=True, text=True, timeout=300)
    said = "".join(resumed.stderr.split())
    assert resumed.returncode == 2 and not ran.exists()
    assert "".join(f"{target} names the Python global {POPEN!r}".split()) in said
    assert "Traceback" not in said


class _Popen:
    """Pickles as a call of subprocess.Popen with ``argv``."""

    def __init__(self, argv: list[str]):
        self.argv = argv

    def __reduce__(self):
        return subprocess.Popen, (self.argv,)


def test_a_gadget_among_the_non_tensor_values_stops_the_resume_and_runs_nothing(tokens, tmp_path, capsys):
    """DCP reads non-tensor values (here AdamW's param_groups entries) with torch.load(weights_only=False); ours
    with weights_only=True. A value replaced by a Popen gadget (appended to the .distcp, the .metadata pointing at
    it, COMMITTED updated) is refused, and like a bad .metadata it stops the run rather than falling back."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader

    out = tmp_path / "run"
    path = write_config(tmp_path / "t.yaml", config(tokens, out, steps=4, checkpoint_every=2, eval_every=0))
    assert main(["train", str(path)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    newest, ran = out / "checkpoints" / "step-000000004", tmp_path / "MARKER"
    metadata = FileSystemReader(newest).read_metadata()  # DCP's own reader: the run just wrote it
    index = next(i for i in metadata.storage_data if type(metadata.state_dict_metadata[i.fqn]).__name__
                 == "BytesStorageMetadata")
    info = metadata.storage_data[index]
    blob = io.BytesIO()
    torch.save(_Popen(["sh", "-c", f"id > {ran}"]), blob)
    shard = newest / info.relative_path
    offset = shard.stat().st_size
    with open(shard, "ab") as f:
        f.write(blob.getvalue())
    metadata.storage_data[index] = dataclasses.replace(info, offset=offset, length=len(blob.getvalue()))
    (newest / ".metadata").write_bytes(pickle.dumps(metadata))  # names only the allowed globals
    recommit(newest, ".metadata", info.relative_path)
    assert main(["train", str(path), "--steps", "6"]) == 2
    said = "".join(capsys.readouterr().err.split())
    assert not ran.exists()
    expected = (f"error: checkpoint {newest} is not safe to load: {shard} holds a value for {index.fqn!r} that "
                "torch.load(weights_only=True) refuses (Unsupported global: GLOBAL ")
    assert "".join(expected.split()) in said and ".Popen);nothinginitwasrun." in said, said
    assert "add_safe_globals" not in said  # torch's advice to allow the global is left out
    assert not (out / "checkpoints" / "step-000000006").exists()
