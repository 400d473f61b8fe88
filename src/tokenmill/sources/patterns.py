"""Source patterns as files: the matches of a local glob or an object-store pattern, checked safe to read (no
symlink loop, no link leading out of the folder the pattern starts from), and a source's files and root."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol

from tokenmill.sources import uris

if TYPE_CHECKING:
    from tokenmill.sources.config import SourceConfig


class Resolves(Protocol):
    """A config whose relative paths are taken from its file's folder: the run's, or a classifier training's."""

    def resolve(self, path: str) -> Path: ...


def pattern_base(full: str) -> Path:
    """The folder a glob pattern starts from: its leading components without wildcards."""
    parts = Path(full).parts
    fixed = []
    for part in parts[:-1]:
        if uris.is_glob(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def _symlink_loop(base: Path) -> Path | None:
    """The first symlinked folder under `base` that leads back to one of its own ancestors, if any.

    `glob("**", recursive=True)` follows folder symlinks, so such a loop makes it list the same files under ever
    longer names, until the path is too long (and two loops in one folder multiply: 2**40 names).
    """
    stack = [(base, frozenset({os.path.realpath(base)}))]
    seen: set[str] = set()
    while stack:
        folder, ancestors = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if not entry.is_dir():
                    continue
            except OSError:
                continue
            real = os.path.realpath(entry.path)
            if real in ancestors:
                return Path(entry.path)
            if real in seen:
                continue  # reached twice through symlinks: glob lists it twice, which source_files dedupes
            seen.add(real)
            stack.append((Path(entry.path), ancestors | {real}))
    return None


def pattern_problems(config: Resolves, pattern: str) -> list[str]:
    """Why the files a pattern matches cannot be read safely (see `check_paths`); empty when they can.

    For an object-store URI: why it cannot be listed (the store does not answer, a wildcard in the bucket name,
    a scheme tokenmill does not read), before any work starts."""
    return checked_matches(config, pattern)[0]


def checked_matches(config: Resolves, pattern: str) -> tuple[list[str], list[Path] | dict[str, tuple[int, int]]]:
    """Why the pattern's files cannot be read safely (empty when they can) and, when they can, the files: one
    listing for both, each local match's real path resolved once (validation once resolved it three times). An
    object-store pattern's objects come as `uris.list_objects` gives them: URI -> (size, mtime), sorted."""
    if uris.is_remote(pattern):
        try:
            return [], uris.list_objects(pattern)
        except (OSError, ValueError) as err:
            return [str(err)], []
    full = str(config.resolve(uris.local_part(pattern)))
    if not uris.is_glob(full):
        # A file named outright is the configured path itself, wherever a symlink takes it.
        real = Path(os.path.realpath(full))
        return [], ([real] if real.is_file() else [])
    base = pattern_base(full)
    if "**" in full and base.is_dir():
        loop = _symlink_loop(base)
        if loop is not None:
            return [f"{pattern!r} walks through a symlink loop: {loop} -> {os.readlink(loop) if loop.is_symlink() else '?'} "
                    f"leads back to a folder it is in; remove the link or use a pattern without '**'"], []
    problems, files = [], []
    real_base = Path(os.path.realpath(base))
    for match in sorted(glob.glob(full, recursive=True)):
        real = Path(os.path.realpath(match))
        if real.is_dir():
            continue
        if not real.exists():
            problems.append(f"{match} is a broken symlink or a symlink loop (it leads to no file)")
        elif not real.is_relative_to(real_base):
            problems.append(f"{match} is a symlink to {real}, outside {real_base} where the pattern looks; name that "
                            f"file in paths if it is meant to be read")
        elif real.is_file():
            files.append(real)
    return problems, ([] if problems else sorted(files))


def expand_pattern(config: Resolves, pattern: str) -> list[Path] | list[str]:
    """The files a pattern matches, sorted: local ones by real path (`Path`), object URIs (`str`) for an object-store
    pattern; none when they cannot be read safely (`pattern_problems` says why)."""
    return list(checked_matches(config, pattern)[1])


def matched_files(config: Resolves, source: SourceConfig,
                  listed: Mapping[str, Iterable[Path | str]] | None = None) -> list[Path | str]:
    """The files the source's patterns match (local ones by real path, objects by URI), sorted and without repeats.
    `listed`: patterns' matches already listed (`expand_pattern`'s, or `uris.list_objects`'), not listed again."""
    listed = listed or {}
    found = {f for pattern in source.paths for f in (listed[pattern] if pattern in listed else expand_pattern(config, pattern))}
    return sorted(found, key=uris.sort_key)


def source_files(config: Resolves, source: SourceConfig,
                 listed: Mapping[str, Iterable[Path | str]] | None = None) -> tuple[Path | str, list[Path | str]]:
    """The source's root folder (a folder URI for objects) and its files, sorted and without repeats (`listed`: as
    for `matched_files`)."""
    files = matched_files(config, source, listed)
    if source.root is not None:
        root: Path | str = (source.root if uris.is_remote(source.root)
                            else config.resolve(uris.local_part(source.root)).resolve())
    elif files and all(isinstance(f, str) for f in files):
        root = uris.common_folder(files)  # type: ignore[arg-type]
    else:
        root = Path(os.path.commonpath([str(f.parent) for f in files]))  # type: ignore[union-attr]
    return root, files
