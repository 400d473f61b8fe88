"""A checkpoint from someone else runs no code and changes nothing: DCP's ``.metadata`` admits exact (module, name)
globals only, and only the operations DCP's pickle makes on them.

The allow-list is checked against what real ``tokenmill train`` checkpoints hold (recorded with pickletools); a
generated family of gadgets (every callable reachable by attribute walk from each allowed module, spelled as a
protocol 4 dotted name through STACK_GLOBAL and GLOBAL, and by its own module and name through GLOBAL and INST) is
refused with nothing run; a second family acts on every allowed object with every opcode that changes or calls
what is on the stack (BUILD, SETITEM(S), APPEND(S), ADDITEMS, REDUCE, NEWOBJ) and is refused with nothing changed;
and a real run whose ``.metadata`` is replaced by the issue's gadget, or by the reviewer's BUILD on PosixPath, stops
on resume naming the file, the marker the gadget would write absent and every path of the process as it was."""

from __future__ import annotations

import _compat_pickle
import contextlib
import copyreg
import pathlib
import dataclasses
import hashlib
import io
import json
import os
import pickle
import pickletools
import subprocess
import sys
import types
import warnings
from collections.abc import Iterator
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


@pytest.fixture(scope="module")
def first_run(tokens, tmp_path_factory):
    """A real 2-step ``tokenmill train`` run: (output folder, config, its step-2 ``.metadata``'s bytes)."""
    root = tmp_path_factory.mktemp("unpickle-run")
    out = root / "run"
    path = write_config(root / "t.yaml", config(tokens, out, steps=2, checkpoint_every=2, eval_every=0,
                                                warmup_steps=1))
    assert main(["train", str(path)]) == 0
    return out, path, (out / "checkpoints" / "step-000000002" / ".metadata").read_bytes()


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


def test_the_allow_list_is_what_a_real_run_writes_and_it_resumes(first_run, capsys):
    """A real 1-rank run's checkpoints name exactly the recorded globals, all allowed, and the run resumes through
    the allow-list. (2 ranks: the same set, recorded when the list was made; their resume through it is
    tests/train/test_trainer.py::test_two_processes_with_torchrun_then_resume_on_one_and_on_three.)"""
    from tokenmill.train.safe_unpickle import ALLOWED

    out, path, metadata = first_run
    named = pickled_globals(metadata)
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
    library fills it), even once another unpickler of the process has resolved the code: copyreg keeps what it
    resolved in a process-wide cache, which pickle's own EXT1 hands out without asking find_class."""
    from tokenmill.train.safe_unpickle import RefusedGlobal, load_metadata

    ran = tmp_path / "ran"
    copyreg.add_extension("posix", "system", 0xF0)
    try:
        with pytest.raises(RefusedGlobal, match=r"\('posix', 'system'\)"):
            load_metadata(io.BytesIO(b"\x80\x02\x82\xf0" + shell(ran)), "ext.metadata")
        assert pickle.loads(b"\x80\x02\x82\xf0.") is os.system  # noqa: S301 - fills copyreg's cache
        with pytest.raises(RefusedGlobal, match=r"\('posix', 'system'\)"):
            load_metadata(io.BytesIO(b"\x80\x02\x82\xf0" + shell(ran)), "ext.metadata")
    finally:
        copyreg.remove_extension("posix", "system", 0xF0)  # empties the cache too
    assert not ran.exists()


def test_a_refusal_survives_the_trip_to_another_rank():
    """DCP sends a rank's failure to the others pickled: the refusal must arrive as itself, or the ranks would fall
    back to an older checkpoint instead of stopping."""
    from tokenmill.train.checkpoint import _RefusedValue
    from tokenmill.train.safe_unpickle import RefusedGlobal, RefusedPickle

    for err in (RefusedGlobal("a/.metadata", "posix", "system"), RefusedPickle("a/.metadata", "uses pickle's X"),
                _RefusedValue("__1_0.distcp", "k", "why")):
        back = pickle.loads(pickle.dumps(err))  # noqa: S301 - our own exception, as torch's collectives move it
        assert type(back) is type(err) and str(back) == str(err) and vars(back) == vars(err)


# ---- what DCP never writes, other than a global: refused as crafted, not read as damage


def test_persistent_ids_other_top_objects_and_opcodes_dcp_never_writes_are_refused():
    """Each is refused with RefusedPickle (which stops a resume), naming the file and what it holds; an unknown
    opcode byte or a cut stream is an ordinary UnpicklingError (damage: the resume falls back)."""
    from tokenmill.train.safe_unpickle import RefusedGlobal, RefusedPickle, load_metadata

    metadata = "(ctorch.distributed.checkpoint.metadata\nMetadata\n"
    cases = {
        "BINPERSID": b"\x80\x02X\x01\x00\x00\x00xQ.", "PERSID": b"Px\n.",
        "INST": f"{metadata.replace('(c', '(i')}.".encode(), "OBJ": f"{metadata}o.".encode(),
        "NEWOBJ_EX": f"\x80\x04{metadata[1:]})}}\x92.".encode("latin-1"),
        "NEXT_BUFFER": b"\x80\x05\x97.", "READONLY_BUFFER": b"\x80\x05N\x98.",
        "BYTEARRAY8": b"\x80\x05\x96\x01" + bytes(7) + b"x.",
        "STRING": b"S'x'\n.", "BINSTRING": b"T\x01\x00\x00\x00x.", "SHORT_BINSTRING": b"U\x01x.",
    }
    for opcode, data in cases.items():
        with pytest.raises(RefusedPickle, match=rf"^o\.metadata uses pickle's {opcode} opcode \(.*\), which DCP's "
                                                "metadata never holds: refused, nothing in the file was run$"):
            load_metadata(io.BytesIO(data), "o.metadata")
    with pytest.raises(RefusedGlobal, match=r"\('posix', 'system'\)"):  # INST names its global first
        load_metadata(io.BytesIO(b"(Vid\niposix\nsystem\n."), "i.metadata")
    with pytest.raises(RefusedPickle, match="d.metadata has a dict as its top object, not a Metadata"):
        load_metadata(io.BytesIO(pickle.dumps({"a": 1})), "d.metadata")
    for damaged in (b"\x80\x04\xff.", pickle.dumps({"a": 1})[:-3], b""):
        with pytest.raises((pickle.UnpicklingError, EOFError)) as raised:
            load_metadata(io.BytesIO(damaged), "cut.metadata")
        assert not isinstance(raised.value, RefusedPickle)


# ---- operations on the allowed objects: they are live objects of this process, and change for all of it


def allowed_objects() -> dict[str, tuple[object, bytes]]:
    """Every object a ``.metadata`` can put on the stack without building it, with the opcodes that push it: the
    allowed globals, and what the allowed calls return that the whole process shares (a layout, an enum member)."""
    from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING
    from torch.serialization import _get_layout

    from tokenmill.train.safe_unpickle import ALLOWED

    found = {f"{module}:{name}": (obj, _text(module) + _text(name) + b"\x93") for (module, name), obj in ALLOWED.items()}
    layout = found["torch.serialization:_get_layout"][1]
    found["torch.strided"] = (_get_layout("torch.strided"), layout + plain(("torch.strided",)) + b"R")
    enum = found["torch.distributed.checkpoint.metadata:_MEM_FORMAT_ENCODING"][1]
    found.update({str(member): (member, enum + plain((member.value,)) + b"R") for member in _MEM_FORMAT_ENCODING})
    return found


def global_of(obj: object) -> bytes:
    """STACK_GLOBAL of the allowed pair that stands for ``obj``."""
    return next(push for value, push in allowed_objects().values() if value is obj)


def plain(value: object) -> bytes:
    """Opcodes that push ``value`` and memoize nothing (so a pickle that follows keeps its memo indices)."""
    return _tail(pickletools.optimize(pickle.dumps(value, protocol=4)))[:-1]


def state_of(objects: list[object]) -> dict[int, tuple[object, dict]]:
    """Each object's attributes (its ``__dict__``, copied), and _get_layout's cache, by id."""
    from torch.serialization import _get_layout

    found = {id(obj): (obj, dict(vars(obj))) for obj in objects if hasattr(obj, "__dict__")}
    found[id(_get_layout.cache)] = (_get_layout.cache, dict(_get_layout.cache))
    return found


def changed(before: dict[int, tuple[object, dict]]) -> list[str]:
    """What differs from ``before`` (by identity: a replaced value is a change even if equal)."""
    out: list[str] = []
    for obj, attrs in before.values():
        now = obj if isinstance(obj, dict) else vars(obj)
        out += [f"{obj!r:.40}: {key}" for key in now.keys() | attrs.keys() if now.get(key, out) is not attrs.get(key, out)
                and not (key == "__slotnames__" and now.get(key) == [])]  # copyreg's cache, when a save pickles it
    return out


@contextlib.contextmanager
def watched() -> Iterator[list[str]]:
    """Yields a list that holds, on exit, what changed on the allowed objects; they are then put back at once (on
    code without the fix a payload that gets through changes them for the whole process, pytest's own paths too)."""
    before = state_of([obj for obj, _ in allowed_objects().values()])
    found: list[str] = []
    try:
        yield found
    finally:
        found += changed(before)
        for obj, attrs in before.values():
            if isinstance(obj, dict):
                obj.clear()
                obj.update(attrs)
                continue
            for key in set(vars(obj)) - set(attrs):
                delattr(obj, key)
            for key, value in attrs.items():
                if vars(obj).get(key, found) is not value:
                    setattr(obj, key, value)


def _tail(metadata: bytes) -> bytes:
    """A pickled Metadata without its PROTO and FRAME header, to follow a payload in the same stream (it memoizes
    from 0, so the payload memoizes nothing)."""
    ops = list(pickletools.genops(metadata))
    assert ops[0][0].name == "PROTO"
    return metadata[ops[2][2]:] if ops[1][0].name == "FRAME" else metadata[ops[1][2]:]


def operations(target: bytes) -> dict[str, bytes]:
    """Each opcode that acts on the object below it, applied to the object ``target`` pushes, then POP: BUILD with a
    dict and with slot state (the reviewer's ``_str`` of PosixPath, the ``cache`` of _get_layout), SETITEM(S),
    APPEND(S), ADDITEMS, REDUCE with arguments no allowed call takes, NEWOBJ with arguments."""
    state = plain({"_str": "/tmp/HIJACK", "cache": {}, "__class__": None})
    return {
        "BUILD": target + state + b"b0",
        "BUILD slots": target + b"N" + state + b"\x86b0",
        "SETITEM": target + b"X\x05\x00\x00\x00cache}s0",
        "SETITEMS": target + b"(X\x04\x00\x00\x00_strK\x01u0",
        "APPEND": target + b"K\x01a0",
        "APPENDS": target + b"(K\x01e0",
        "ADDITEMS": target + b"(K\x01\x900",
        "REDUCE": target + plain(("/tmp/HIJACK", 1.5)) + b"R0",
        "NEWOBJ": target + plain((1,)) + b"\x810",
    }


def test_every_operation_on_an_allowed_object_is_refused_and_changes_nothing():
    """The reviewer's payload on PosixPath, and its family: every opcode that changes or calls the object below it,
    applied to every allowed global and to every shared object an allowed call returns, followed by a valid Metadata
    (so a payload that got through would load). Each is refused naming the opcode, and no attribute of any of them,
    nor _get_layout's cache, changed. A new path still prints as itself."""
    from torch.distributed.checkpoint.metadata import Metadata

    from tokenmill.train.safe_unpickle import load_metadata

    tail = _tail(pickle.dumps(Metadata(state_dict_metadata={}), protocol=4))
    let_through = []
    for label, (obj, target) in allowed_objects().items():
        for opcode, payload in operations(target).items():
            try:
                with watched() as changes:
                    load_metadata(io.BytesIO(b"\x80\x04" + payload + tail), "op.metadata")
            except pickle.UnpicklingError as e:  # RefusedPickle, saying which opcode it refused
                if f"(pickle's {opcode.split()[0]}), which DCP's metadata never holds: refused" not in str(e):
                    let_through.append((label, opcode, repr(e)))
            except Exception as e:  # noqa: BLE001 - an error of the object itself: it was acted on
                let_through.append((label, opcode, repr(e)))
            else:
                let_through.append((label, opcode, "loaded"))
            if changes:
                let_through.append((label, opcode, changes))
    assert not let_through, let_through[:10]
    assert str(pathlib.Path("x")) == "x" and str(pathlib.PosixPath("/a", "b")) == "/a/b"


def test_the_data_classes_take_only_their_own_fields_and_are_made_without_arguments():
    """NEWOBJ makes DCP's metadata classes with no arguments; BUILD gives them a dict of their own fields (never
    ``__class__``, never slot state), or TensorProperties the five values its __setstate__ takes, each of its type."""
    from torch.distributed.checkpoint import filesystem, metadata

    from tokenmill.train.safe_unpickle import load_metadata

    classes = [metadata.Metadata, metadata.MetadataIndex, metadata.StorageMeta, metadata.TensorStorageMetadata,
               metadata.BytesStorageMetadata, metadata.ChunkStorageMetadata, metadata.TensorProperties,
               filesystem._StorageInfo]
    for cls in classes:
        assert "__setstate__" not in vars(cls) or cls is metadata.TensorProperties  # else BUILD must call it
        made = global_of(cls) + b")\x81"
        for state in ({"__class__": None}, {"not_a_field": 1}, ({"fqn": "x"}, {"fqn": "x"}), [1],
                      ("float32", None, False, 0, False)):
            with pytest.raises(pickle.UnpicklingError, match=r"\(pickle's BUILD\)"):
                load_metadata(io.BytesIO(b"\x80\x04" + made + plain(state) + b"b."), "b.metadata")
        with pytest.raises(pickle.UnpicklingError, match=r"with arguments \(pickle's NEWOBJ\)"):
            load_metadata(io.BytesIO(b"\x80\x04" + global_of(cls) + plain((1,)) + b"\x81."), "n.metadata")


def test_the_allowed_calls_take_only_the_arguments_dcp_gives_them():
    """torch.Size a tuple of ints, PosixPath strings, the memory-format enum an int, _get_layout a string; an Enum
    called with two arguments would make a new class (its functional API)."""
    import torch
    from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING
    from torch.serialization import _get_layout

    from tokenmill.train.safe_unpickle import load_metadata

    bad = {torch.Size: [("3",), ((1, "2"),), ([1, 2],)], pathlib.PosixPath: [(1,), (b"/etc",)],
           _MEM_FORMAT_ENCODING: [("A", "B C"), ("0",)], _get_layout: [(1,), ("torch.strided", 2)]}
    for func, calls in bad.items():
        for args in calls:
            with pytest.raises(pickle.UnpicklingError, match=rf"calls {func.__qualname__} with .* \(pickle's REDUCE\)"):
                load_metadata(io.BytesIO(b"\x80\x04" + global_of(func) + plain(args) + b"R."), "r.metadata")


def test_tuples_nested_a_million_deep_are_refused_before_hashing_crashes_the_process():
    """A dict keyed by a tuple nested a million deep (3 MB): hashing it overflows the C stack and the process dies
    of SIGSEGV (the standard unpickler does, and the run with it). Here the nesting is refused past MAX_NESTING,
    while a tuple nested MAX_NESTING deep is no refusal (this one is, as a dict is not a Metadata)."""
    from tokenmill.train.safe_unpickle import load_metadata

    deep = b"\x80\x04}" + b")" + b"\x85" * 1_000_000 + b"Ns."
    with pytest.raises(pickle.UnpicklingError, match=r"^deep.metadata nests tuples more than \d+ deep"):
        load_metadata(io.BytesIO(deep), "deep.metadata")
    from tokenmill.train.safe_unpickle import MAX_NESTING

    with pytest.raises(pickle.UnpicklingError, match="top object"):
        load_metadata(io.BytesIO(b"\x80\x04}" + b")" + b"\x85" * (MAX_NESTING - 1) + b"Ns."), "d.metadata")


def test_the_reviewers_payload_before_a_real_metadata_is_refused(first_run):
    """The payload as reported, GLOBAL pathlib PosixPath; (None, {'_str': ...}); BUILD; POP, followed by the
    ``.metadata`` of a real run: the standard unpickler loads it and every new path of the process prints as
    /tmp/rv31/HIJACK."""
    from tokenmill.train.safe_unpickle import RefusedPickle, load_metadata

    hijack = b"\x80\x02cpathlib\nPosixPath\nN}X\x04\x00\x00\x00_strX\x10\x00\x00\x00/tmp/rv31/HIJACKs\x86b0"
    data = hijack + _tail(first_run[2])
    with watched() as changes, pytest.raises(pickle.UnpicklingError) as raised:
        try:
            load_metadata(io.BytesIO(data), "hijack.metadata")
        finally:
            hijacked = str(pathlib.Path("x"))
    assert hijacked == "x" and not changes
    assert isinstance(raised.value, RefusedPickle)
    assert str(raised.value) == ("hijack.metadata sets the state of the class pathlib.PosixPath (pickle's BUILD), "
                                 "which DCP's metadata never holds: refused, nothing in the file was run")
    assert type(load_metadata(io.BytesIO(first_run[2]), "real.metadata")).__name__ == "Metadata"  # itself loads


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
    """The issue's gadget, then the reviewer's BUILD on PosixPath before the checkpoint's own metadata: each resume
    stops with one line naming the file and what it holds; nothing runs, no path of the process changes."""
    out = tmp_path / "run"
    path = write_config(tmp_path / "t.yaml", config(tokens, out, steps=4, checkpoint_every=2, eval_every=0))
    assert main(["train", str(path)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    ran = tmp_path / "MARKER"
    newest = out / "checkpoints" / "step-000000004"
    real = (newest / ".metadata").read_bytes()
    hijack = b"\x80\x04" + _text("pathlib") + _text("PosixPath") + b"\x93N" + plain({"_str": str(ran)}) + b"\x86b0"
    for payload, what in ((stack_global(*POPEN, argv(ran)), f"names the Python global {POPEN!r}"),
                          (hijack + _tail(real), "sets the state of the class pathlib.PosixPath (pickle's BUILD)")):
        target = plant(newest, payload)
        with watched() as changes:
            try:
                assert main(["train", str(path), "--steps", "6"]) == 2
            finally:
                hijacked = str(pathlib.Path("x"))
        said = "".join(capsys.readouterr().err.split())  # rich wraps long lines
        assert not ran.exists() and hijacked == "x" and not changes
        expected = (f"error: checkpoint {newest} is not safe to load: {target} {what}, "
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
