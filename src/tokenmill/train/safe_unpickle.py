"""DCP's ``.metadata`` unpickled admitting exact (module, name) globals and only the operations DCP's pickle makes, so a
checkpoint from others runs no code and changes nothing outside the objects it builds.

Globals. A pickle names every callable it uses as a global: a module and a name (``GLOBAL``, ``STACK_GLOBAL``,
``INST``, or an ``EXT`` code from copyreg's registry), which ``find_class`` resolves. From protocol 4 on, the standard
``find_class`` walks a dotted name attribute by attribute, so "allow this module" admits everything reachable from it:
``("torch.distributed.checkpoint.metadata", "torch._strobelight.cli_function_profiler.subprocess.Popen")`` is
``subprocess.Popen``. Here ``find_class`` looks the pair up in a table built at import and never imports or walks
anything; any other pair is refused with :class:`RefusedGlobal`, which names the file and the pair.

Operations. An allowed global is a live object of this process (a class, a function, a dtype), and pickle's other
opcodes act on whatever is on the stack: ``BUILD`` sets attributes, so ``GLOBAL pathlib PosixPath`` followed by
``BUILD (None, {'_str': '/x'})`` would make every new path of the process print as ``/x``; ``BUILD`` on
``_get_layout`` would replace its cache; ``SETITEM``/``APPEND`` call ``__setitem__``/``append`` of any object.
So, following torch's ``torch/_weights_only_unpickler.py`` (whose own unpickler knows protocol 2 only, while DCP
writes protocol 4), this subclasses the pure-Python ``pickle._Unpickler`` with its own dispatch table:

- an opcode allow-list: the data opcodes, the two global opcodes, ``EXT1/2/4`` (resolved through ``find_class``,
  never through copyreg's process-wide cache), ``NEWOBJ``, ``REDUCE`` and ``BUILD``; ``INST``, ``OBJ``,
  ``NEWOBJ_EX``, persistent ids, out-of-band buffers and Python 2 byte strings are refused;
- ``NEWOBJ`` creates only DCP's metadata data classes, with no arguments (how DCP's pickle makes them);
- ``BUILD`` sets state only on an instance whose exact type is one of those classes: a dict of its own dataclass
  fields, put in the instance's ``__dict__`` (none of them defines ``__setstate__``), or, for ``TensorProperties``,
  the 5-tuple its ``__setstate__`` takes, each item of the type it names; never on a class, function or dtype;
- ``REDUCE`` calls only ``torch.Size`` (a tuple of ints), ``PosixPath`` (strings), ``_MEM_FORMAT_ENCODING`` (an int)
  and ``_get_layout`` (a string, looked up in torch's cache);
- ``SETITEM(S)``, ``APPEND(S)`` and ``ADDITEMS`` act only on a plain ``dict``, ``list`` or ``set`` the pickle made;
- tuples nest at most :data:`MAX_NESTING` deep: hashing a tuple nested a million deep (a dict key) overflows the C
  stack, and the process dies of a segmentation fault;
- the object returned is a ``Metadata``.

Anything else is refused with :class:`RefusedPickle` (a global: :class:`RefusedGlobal`), naming the file and what
it holds; an unknown opcode byte, a truncated stream or an allowed call that fails on its arguments is an ordinary
``UnpicklingError``, as for a damaged file.

The tables are what a ``.metadata`` written by DCP (torch 2.13) for ``tokenmill train`` holds, recorded with
``pickletools.genops`` from real runs on 1 and 2 ranks with the optimizer's state (tests/train/test_safe_unpickle.py
records them again and resumes those runs), plus two spellings of the same objects: every ``torch`` dtype (a run
in bf16 or with integer buffers names those) and ``pathlib._local.PosixPath`` (where Python 3.13 pickles a path).
A torch release that adds a class to its metadata is refused loudly, naming the pair to add here once its class is
checked to run no code of its own when unpickled.
"""

from __future__ import annotations

import copyreg
import dataclasses
import io
import pathlib
import pickle
import pickletools
import reprlib
from collections.abc import Callable
from typing import Any, BinaryIO, NoReturn

import torch
from torch.distributed.checkpoint import filesystem as dcp_filesystem
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.serialization import _get_layout

_METADATA = "torch.distributed.checkpoint.metadata"
#: How deep tuples may nest. DCP's deepest is 3 (a Size in a tuple in a tuple); a crash needs ~100,000.
MAX_NESTING = 64


def _allowed() -> dict[tuple[str, str], Any]:
    pairs: dict[tuple[str, str], Any] = {
        (_METADATA, name): getattr(dcp_metadata, name)
        for name in ("Metadata", "MetadataIndex", "StorageMeta", "TensorStorageMetadata", "BytesStorageMetadata",
                     "ChunkStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING")
    }
    pairs[("torch.distributed.checkpoint.filesystem", "_StorageInfo")] = dcp_filesystem._StorageInfo
    pairs[("torch", "Size")] = torch.Size
    pairs[("torch.serialization", "_get_layout")] = _get_layout  # how torch pickles a torch.layout
    # StorageMeta.checkpoint_id: the folder DCP wrote to. Python 3.13 moved the class to pathlib._local.
    pairs[("pathlib", "PosixPath")] = pathlib.PosixPath
    pairs[("pathlib._local", "PosixPath")] = pathlib.PosixPath
    # A dtype pickles as its name in torch's namespace ("float32"); the objects are values, not callables.
    pairs.update({("torch", name): value for name, value in vars(torch).items() if isinstance(value, torch.dtype)})
    return pairs


#: Every global a ``.metadata`` may name, as exact (module, name) pairs, and the object each stands for.
ALLOWED: dict[tuple[str, str], Any] = _allowed()

_Encoding = dcp_metadata._MEM_FORMAT_ENCODING
_PROPERTY_TYPES = (torch.dtype, torch.layout, bool, _Encoding, bool)  # TensorProperties.__getstate__'s tuple

#: The classes ``NEWOBJ`` may create and ``BUILD`` fill: DCP's metadata data classes (dict state: their fields).
BUILT: dict[type, frozenset[str]] = {
    cls: frozenset(f.name for f in dataclasses.fields(cls))
    for cls in (dcp_metadata.Metadata, dcp_metadata.MetadataIndex, dcp_metadata.StorageMeta,
                dcp_metadata.TensorStorageMetadata, dcp_metadata.BytesStorageMetadata,
                dcp_metadata.ChunkStorageMetadata, dcp_metadata.TensorProperties, dcp_filesystem._StorageInfo)
}

#: The callables ``REDUCE`` may call, each with a check of its arguments (a tuple).
CALLED: dict[Any, Callable[[tuple], bool]] = {
    torch.Size: lambda args: len(args) == 1 and type(args[0]) is tuple and all(type(i) is int for i in args[0]),
    pathlib.PosixPath: lambda args: all(type(part) is str for part in args),
    _Encoding: lambda args: len(args) == 1 and type(args[0]) is int,
    _get_layout: lambda args: len(args) == 1 and type(args[0]) is str,
}

#: The opcodes a ``.metadata`` may use (pickletools' names); the object-making ones are checked as described above.
OPCODES = frozenset({
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT",
    "BINFLOAT", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "SHORT_BINBYTES", "BINBYTES", "BINBYTES8",
    "EMPTY_LIST", "APPEND", "APPENDS", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_SET", "ADDITEMS", "FROZENSET",
    "GET", "BINGET", "LONG_BINGET", "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE",
    "GLOBAL", "STACK_GLOBAL", "EXT1", "EXT2", "EXT4", "REDUCE", "NEWOBJ", "BUILD",
})

#: Why a known opcode outside :data:`OPCODES` is refused (the message names it).
_REFUSED_OPCODES = {
    "PERSID": "a persistent id", "BINPERSID": "a persistent id",
    "INST": "a call of a global", "OBJ": "a call of an object", "NEWOBJ_EX": "an object made with keyword arguments",
    "NEXT_BUFFER": "an out-of-band buffer", "READONLY_BUFFER": "an out-of-band buffer", "BYTEARRAY8": "a bytearray",
    "STRING": "a Python 2 byte string", "BINSTRING": "a Python 2 byte string",
    "SHORT_BINSTRING": "a Python 2 byte string",
}


class RefusedPickle(pickle.UnpicklingError):
    """A pickle holds what DCP's metadata never holds; it was refused before anything it names was run.
    ``what`` says what, after the file's name ("uses pickle's BINPERSID opcode (a persistent id)")."""

    def __init__(self, source: str, what: str):
        self.source, self.what = source, what
        super().__init__(f"{source} {what}, which DCP's metadata never holds: refused, nothing in the file was run")

    def __reduce__(self):  # DCP sends a rank's failure to the others pickled
        return type(self), (self.source, self.what)


class RefusedGlobal(RefusedPickle):
    """A pickle named a global outside :data:`ALLOWED`; nothing it names was imported or called."""

    def __init__(self, source: str, module: Any, name: Any):
        self.module, self.name = module, name
        super().__init__(source, f"names the Python global ({module!r}, {name!r})")

    def __reduce__(self):
        return type(self), (self.source, self.module, self.name)


def _named(obj: Any) -> str:
    """``obj`` in a message: a class or function by its qualified name, anything else by its type's and a short repr
    (``reprlib``: bounded in depth and length, as the object may be a list nested a million deep)."""
    if isinstance(obj, type) or callable(obj) and hasattr(obj, "__qualname__"):
        kind = "the class" if isinstance(obj, type) else "the function"
        return f"{kind} {getattr(obj, '__module__', '?')}.{obj.__qualname__}"
    try:
        shown = f" ({reprlib.repr(obj)})"
    except Exception:  # noqa: BLE001 - a repr that fails (a data class holding a deep list) is left out
        shown = ""
    return f"a {type(obj).__module__}.{type(obj).__qualname__}{shown}"


def _member(obj: Any, table: dict) -> bool:
    """``obj`` is a key of ``table`` (an unhashable object, a list the pickle made, is not)."""
    try:
        return obj in table
    except TypeError:
        return False


def _refuse_opcode(name: str) -> Callable[[MetadataUnpickler], None]:
    def refuse(self: MetadataUnpickler) -> None:
        raise RefusedPickle(self.source, f"uses pickle's {name} opcode ({_REFUSED_OPCODES[name]})")
    return refuse


def _unknown_opcode(code: int) -> Callable[[MetadataUnpickler], None]:
    def unknown(self: MetadataUnpickler) -> None:  # what the C unpickler says: a damaged stream, not a crafted one
        raise pickle.UnpicklingError(f"{self.source}: invalid load key {bytes([code])!r}")
    return unknown


def _nesting(load: Callable[[MetadataUnpickler], None]) -> Callable[[MetadataUnpickler], None]:
    """``load`` (an opcode that makes a tuple), then the depth of what it made checked. Tuples only: a frozenset
    hashes its items as it is made, and keeps its own hash, so hashing one never goes deeper than one level."""
    def checked(self: MetadataUnpickler) -> None:
        load(self)
        made = self.stack[-1]
        depth = 1 + max((self._depths.get(id(item), (None, 1))[1] for item in made if isinstance(item, tuple)),
                        default=0)
        if depth > MAX_NESTING:
            raise RefusedPickle(self.source, f"nests tuples more than {MAX_NESTING} deep")
        if depth > 1:
            self._depths[id(made)] = (made, depth)  # the object is kept, so its id is not reused
    return checked


class MetadataUnpickler(pickle._Unpickler):
    """Resolves only the exact pairs of :data:`ALLOWED` and runs only the opcodes of :data:`OPCODES`, each object-making
    one checked (see the module docstring); anything else raises :class:`RefusedPickle`."""

    def __init__(self, file: BinaryIO, source: str):
        super().__init__(file)
        self.source = source
        self._depths: dict[int, tuple[Any, int]] = {}

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED[(module, name)]
        except (KeyError, TypeError):  # TypeError: not a hashable pair
            raise RefusedGlobal(self.source, module, name) from None

    def persistent_load(self, pid: Any) -> Any:  # unreachable (both opcodes are refused); kept closed all the same
        raise RefusedPickle(self.source, f"holds a persistent id ({pid!r})")

    def _refuse(self, what: str) -> NoReturn:
        raise RefusedPickle(self.source, what)

    # ---- the object-making opcodes, each checked before it acts

    def load_inst(self) -> None:  # the global is resolved first, so a refused one is named as such
        self.find_class(self.readline()[:-1].decode("ascii"), self.readline()[:-1].decode("ascii"))
        self._refuse("uses pickle's INST opcode (a call of a global)")

    def get_extension(self, code: int) -> None:
        key = copyreg._inverted_registry.get(code)  # the registry pickle reads
        if not key:
            raise pickle.UnpicklingError(f"{self.source}: unregistered extension code {code}")
        self.append(self.find_class(*key))  # never copyreg's cache of objects that other unpicklers resolved

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        if not _member(cls, BUILT):
            self._refuse(f"creates an object of {_named(cls)} (pickle's NEWOBJ)")
        if args != ():
            self._refuse(f"creates a {cls.__name__} with arguments (pickle's NEWOBJ)")
        self.append(cls.__new__(cls))

    def load_reduce(self) -> None:
        args = self.stack.pop()
        func = self.stack[-1]
        check = CALLED[func] if _member(func, CALLED) else None
        if check is None:
            self._refuse(f"calls {_named(func)} (pickle's REDUCE)")
        if type(args) is not tuple or not check(args):
            self._refuse(f"calls {func.__qualname__} with {_named(args)} (pickle's REDUCE)")
        self.stack[-1] = func(*args)

    def load_build(self) -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        fields = BUILT.get(type(inst))
        if fields is None:
            self._refuse(f"sets the state of {_named(inst)} (pickle's BUILD)")
        if type(inst) is dcp_metadata.TensorProperties:
            if type(state) is not tuple or len(state) != len(_PROPERTY_TYPES) or \
                    not all(isinstance(v, t) for v, t in zip(state, _PROPERTY_TYPES)):
                self._refuse(f"gives a TensorProperties the state {_named(state)} (pickle's BUILD)")
            inst.__setstate__(state)  # torch's own: assigns the five fields, maps the encoding to a memory format
            return
        if type(state) is not dict or not all(type(k) is str and k in fields for k in state):
            self._refuse(f"gives a {type(inst).__name__} the state {_named(state)}, not a dict of its fields "
                         "(pickle's BUILD)")
        inst.__dict__.update(state)

    def _target(self, kind: type, opcode: str) -> Any:
        target = self.stack[-1]
        if type(target) is not kind:
            self._refuse(f"adds items to {_named(target)} (pickle's {opcode})")
        return target

    def load_append(self) -> None:
        value = self.stack.pop()
        self._target(list, "APPEND").append(value)

    def load_appends(self) -> None:
        items = self.pop_mark()
        self._target(list, "APPENDS").extend(items)

    def load_setitem(self) -> None:
        value = self.stack.pop()
        key = self.stack.pop()
        self._target(dict, "SETITEM")[key] = value

    def load_setitems(self) -> None:
        items = self.pop_mark()
        target = self._target(dict, "SETITEMS")
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]

    def load_additems(self) -> None:
        items = self.pop_mark()
        self._target(set, "ADDITEMS").update(items)

    dispatch: dict[int, Callable[[Any], None]] = {code: _unknown_opcode(code) for code in range(256)}


def _dispatch() -> None:
    """Fill :class:`MetadataUnpickler`'s table: pickle's own loaders for the allowed data opcodes, the checked ones
    above for the object-making opcodes, a refusal for every other known opcode."""
    table = MetadataUnpickler.dispatch
    own = {"INST": "load_inst", "NEWOBJ": "load_newobj", "REDUCE": "load_reduce", "BUILD": "load_build",
           "APPEND": "load_append", "APPENDS": "load_appends", "SETITEM": "load_setitem",
           "SETITEMS": "load_setitems", "ADDITEMS": "load_additems"}
    for op in pickletools.opcodes:
        code = op.code.encode("latin-1")[0]
        if op.name in own and (op.name in OPCODES or op.name == "INST"):
            table[code] = getattr(MetadataUnpickler, own[op.name])
        elif op.name in OPCODES:
            load = pickle._Unpickler.dispatch[code]
            table[code] = _nesting(load) if op.name in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3") else load
        else:
            table[code] = _refuse_opcode(op.name)


_dispatch()


def load_metadata(f: BinaryIO, source: str) -> dcp_metadata.Metadata:
    """The ``Metadata`` pickled in ``f`` (read from ``source``, which errors name): :class:`RefusedPickle` (or its
    :class:`RefusedGlobal`) for anything DCP's metadata never holds, ``UnpicklingError`` for a damaged stream."""
    # Read whole first: a length field in the stream then asks for at most what the file holds, never gigabytes.
    try:
        obj = MetadataUnpickler(io.BytesIO(f.read()), source).load()
    except RefusedPickle:
        raise
    except Exception as e:  # noqa: BLE001 - the pure-Python unpickler meets a cut stream as IndexError, KeyError...
        raise pickle.UnpicklingError(f"{source} is not a whole pickle ({type(e).__name__}: {e})") from e
    if not isinstance(obj, dcp_metadata.Metadata):
        raise RefusedPickle(source, f"has a {type(obj).__name__} as its top object, not a Metadata")
    return obj
