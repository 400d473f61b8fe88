"""DCP's ``.metadata`` unpickled admitting exact (module, name) globals only, so a checkpoint from others runs no code.

A pickle names every callable it uses as a global: a module and a name (``GLOBAL``, ``STACK_GLOBAL``, ``INST``, or an
``EXT`` code from copyreg's registry), which ``Unpickler.find_class`` resolves. From protocol 4 on, the standard
``find_class`` walks a dotted name attribute by attribute, so "allow this module" admits everything reachable from it:
``("torch.distributed.checkpoint.metadata", "torch._strobelight.cli_function_profiler.subprocess.Popen")`` is
``subprocess.Popen``. Here ``find_class`` looks the pair up in a table built at import and never imports or walks
anything; any other pair is refused with :class:`RefusedGlobal`, which names the file and the pair.

The table is what a ``.metadata`` written by DCP (torch 2.13) for ``tokenmill train`` holds, recorded with
``pickletools.genops`` from real runs on 1 and 2 ranks with the optimizer's state (tests/train/test_safe_unpickle.py
records them again and resumes those runs), plus two spellings of the same objects: every ``torch`` dtype (a run
in bf16 or with integer buffers names those) and ``pathlib._local.PosixPath`` (where Python 3.13 pickles a path).
Each entry is a plain data class, a dtype, or ``torch.serialization._get_layout``, which returns only a
``torch.layout`` it finds by name in a cache. A torch release that adds a class to its metadata is refused loudly,
naming the pair to add here once its class is checked to run no code of its own when unpickled.
"""

from __future__ import annotations

import pathlib
import pickle
from typing import Any, BinaryIO

import torch
from torch.distributed.checkpoint import filesystem as dcp_filesystem
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.serialization import _get_layout

_METADATA = "torch.distributed.checkpoint.metadata"


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


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a global outside :data:`ALLOWED`; nothing it names was imported or called."""

    def __init__(self, source: str, module: Any, name: Any):
        self.source, self.module, self.name = source, module, name
        super().__init__(f"{source} names the Python global ({module!r}, {name!r}), which DCP's metadata never "
                         "holds: refused, nothing in the file was run")

    def __reduce__(self):  # DCP sends a rank's failure to the others pickled
        return type(self), (self.source, self.module, self.name)


class MetadataUnpickler(pickle.Unpickler):
    """Resolves only the exact pairs of :data:`ALLOWED`; persistent ids and out-of-band buffers are refused too."""

    def __init__(self, file: BinaryIO, source: str):
        super().__init__(file)
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED[(module, name)]
        except (KeyError, TypeError):  # TypeError: not a hashable pair (the C unpickler passes str, but be sure)
            raise RefusedGlobal(self.source, module, name) from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError(f"{self.source} holds a persistent id ({pid!r}), which DCP's metadata never "
                                     "holds: refused")


def load_metadata(f: BinaryIO, source: str) -> dcp_metadata.Metadata:
    """The ``Metadata`` pickled in ``f`` (read from ``source``, which errors name): :class:`RefusedGlobal` for a global
    outside :data:`ALLOWED`, ``UnpicklingError`` when the file holds anything but a ``Metadata``."""
    obj = MetadataUnpickler(f, source).load()
    if not isinstance(obj, dcp_metadata.Metadata):
        raise pickle.UnpicklingError(f"{source} holds a {type(obj).__name__}, not DCP's Metadata")
    return obj
