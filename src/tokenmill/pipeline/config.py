"""The run config: one YAML file, validated in full before any work starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Mapping, Optional, TypeVar

from pydantic import BaseModel, Field, PrivateAttr, StrictInt, ValidationError, create_model, model_validator
from pydantic_core import core_schema

from tokenmill.errors import ConfigError
from tokenmill.pipeline import registry
from tokenmill.config_base import StageConfig, StrictModel, expand_path, key_path, load_yaml, resolve
from tokenmill.pipeline.contract import RunContext, SourceStage, Stage, config_paths
from tokenmill.sources import uris
from tokenmill.sources.config import SourceConfig
from tokenmill.sources.patterns import checked_matches, matched_files


class _StagesBase(StrictModel):
    """The stages to run, in pipeline order; leave one out to skip it. One optional key per registered stage."""

    def configured(self) -> list[tuple[str, StageConfig]]:
        """The configured stages, in pipeline order."""
        return [(name, getattr(self, name)) for name in type(self).model_fields if getattr(self, name) is not None]


_stages_model: type[_StagesBase] | None = None


def stages_config() -> type[_StagesBase]:
    """The `stages` model, one optional field per registered stage (its `config_class`), built on first use: the
    stage modules are imported then, not when this module is."""
    global _stages_model
    if _stages_model is None:
        fields: dict[str, Any] = {}
        for name, cls in registry.stage_classes().items():
            if issubclass(cls, SourceStage):
                continue
            doc = (cls.__doc__ or "").strip().splitlines()
            fields[name] = (Optional[cls.config_class], Field(default=None, description=doc[0] if doc else None))
        _stages_model = create_model("StagesConfig", __base__=_StagesBase, __module__=__name__, **fields)
    return _stages_model


def _ingest_config() -> type[BaseModel]:
    return registry.source_stage().config_class


class _Registered:
    """A field whose model comes from the stage registry, looked up when a config is validated (so importing this
    module imports no stage); pydantic's errors keep their full location (`stages.clean.blocklist`)."""

    def __init__(self, model: Any):
        self.model = model

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        def validate(value: Any) -> Any:
            model = self.model()
            return value if isinstance(value, model) else model.model_validate(value)

        return core_schema.no_info_plain_validator_function(
            validate, serialization=core_schema.plain_serializer_function_ser_schema(
                lambda value, info: value.model_dump(mode=info.mode), info_arg=True))


class ExecutionConfig(StrictModel):
    """How to run; never part of a stage's identity, so changing it never recomputes anything."""

    workers: Optional[int] = Field(default=None, ge=1)
    """Most tasks in flight at once; default: the cluster's CPUs."""
    ray_address: Optional[str] = None
    """Join this Ray cluster instead of starting a local one bound to 127.0.0.1."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of a failing task before it is reported by name."""


class RunConfig(StrictModel):
    """A whole run: sources, stages and where they write."""

    output: str
    """Run folder; every stage writes `<output>/<stage>/`. Relative to the config file's folder. Like every path
    in the config, `~` and environment variables (`$HOME/run`, `${SCRATCH}/run`) are expanded when it is loaded."""
    seed: StrictInt = 0
    """Seed of every random choice (keyed hashes), so reruns choose the same documents. An integer: `true` or
    `"5"` is refused, not taken as 1 or 5."""
    sources: list[SourceConfig] = Field(min_length=1)
    """The input sources."""
    ingest: Annotated[Any, _Registered(_ingest_config)] = Field(default_factory=lambda: _ingest_config()())
    """Options of the implicit ingest stage (`tokenmill.stages.ingest.IngestConfig`)."""
    stages: Annotated[Any, _Registered(stages_config)] = Field(default_factory=lambda: stages_config()())
    """The stages to run after ingest, one key per stage (see `stages_config`)."""
    execution: ExecutionConfig = ExecutionConfig()
    """Execution-only options (workers, Ray address, retries)."""
    base_dir: str = Field(default=".", exclude=True)
    """Folder relative paths are resolved against (set by `load_config`, not in YAML)."""
    _listed: tuple[str, dict[str, Any]] | None = PrivateAttr(default=None)
    """(base_dir, each source pattern's matches) as `check_paths` listed them; see `validated_listing`."""

    @model_validator(mode="after")
    def _unique_sources(self) -> "RunConfig":
        seen: set[str] = set()
        for source in self.sources:
            if source.name in seen:
                raise ValueError(f"source name {source.name!r} is used twice")
            seen.add(source.name)
        return self

    def resolve(self, path: str) -> Path:
        """A config path made absolute against the config file's folder, `~` and `$VAR` expanded
        (`config_base.resolve`, the one way every stage opens the files its config names)."""
        return resolve(path, self.base_dir)

    @property
    def output_dir(self) -> Path:
        """The output as a local folder (for local-only tools); see `output_location` for URIs."""
        return self.resolve(self.output)

    @property
    def output_location(self) -> str:
        """Where the run writes: a URI (``file://``, ``s3://``, opened through pyarrow.fs) as given, else the folder."""
        return self.output if "://" in self.output else str(self.resolve(self.output))

    def source(self, name: str) -> SourceConfig:
        return next(s for s in self.sources if s.name == name)

    def validated_listing(self) -> dict[str, Any]:
        """Each source pattern's matches as validation listed them (local files by real path; object URIs with
        their size and mtime), so that a run reads exactly the files its validation checked and lists each pattern
        once (on a store a request per thousand objects; a file that appeared after validation, a symlink out of
        the folder say, is not read unchecked). Empty for a config that `check_paths` did not pass (one built in
        code) or a copy moved to another folder: then each user lists anew."""
        if self._listed is None or self._listed[0] != self.base_dir:
            return {}
        return self._listed[1]


def format_validation_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"  {key_path(e['loc'])}: {msg}")
    return "invalid config:\n" + "\n".join(lines)


RUN_PATH_FIELDS = ("output", "sources[].paths[]", "sources[].root")
"""The run's own fields that name a file or folder (`name[]`: each item of a list)."""


def path_fields() -> tuple[str, ...]:
    """Every config field that names a file or folder: the run's, then each stage's declared `paths` under
    `stages.<name>.`. `parse_config` expands `~` and environment variables in each before validation, so the
    validated config, every stage that opens these files and the config dumped beside the output all hold the
    same expanded path."""
    stages = [f"stages.{name}.{key}" for name, cls in registry.stage_classes().items()
              if not issubclass(cls, SourceStage) for key in cls.paths]
    return (*RUN_PATH_FIELDS, *stages)


def _expand_fields(node: Any, steps: list[str], key: str, problems: list[str]) -> Any:
    """`node` with the strings that `steps` reach expanded; problems named by key; any other shape is left for
    validation to report."""
    if not steps:
        if not isinstance(node, str):
            return node
        try:
            return expand_path(node)
        except ValueError as err:
            problems.append(f"  {key}: {err}")
            return node
    name, each = steps[0].removesuffix("[]"), steps[0].endswith("[]")
    if not isinstance(node, dict) or name not in node:
        return node
    child, where = node[name], f"{key}.{name}" if key else name
    if each and isinstance(child, list):
        child = [_expand_fields(item, steps[1:], f"{where}[{i}]", problems) for i, item in enumerate(child)]
    elif not each:
        child = _expand_fields(child, steps[1:], where, problems)
    return {**node, name: child}


def expand_paths(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of a config mapping with `~` and environment variables expanded in every `path_fields()` entry;
    raises ConfigError naming each path whose variable is unset or empty."""
    problems: list[str] = []
    for field in path_fields():
        data = _expand_fields(data, field.split("."), "", problems)
    if problems:
        raise ConfigError(uris.display_uri("invalid config:\n" + "\n".join(problems)))
    return data


def parse_config(data: Any, base_dir: str | os.PathLike = ".") -> RunConfig:
    """Validate a config mapping; raises ConfigError naming each bad key.

    `~` and environment variables in paths are expanded first (`expand_paths`); relative paths are then taken
    from `base_dir`."""
    return validate_config(RunConfig, data, base_dir, expand_paths, check_paths, "output, seed, sources, stages")


ConfigT = TypeVar("ConfigT", bound=BaseModel)


def validate_config(model: type[ConfigT], data: Any, base_dir: str | os.PathLike, expand: Callable[[dict], dict],
                    check: Callable[[ConfigT], None], keys: str) -> ConfigT:
    """A config file's mapping as `model`: paths expanded (`expand`), validated with `base_dir` (the config file's
    folder) for relative paths, then every path checked (`check`); raises ConfigError naming each bad key. `keys`
    names the top-level keys for the message when the top level is not a mapping."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config: the top level must be a mapping ({keys})")
    data = expand(data)
    try:
        config = model.model_validate({**data, "base_dir": str(Path(base_dir).resolve())})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None
    check(config)
    return config


def read_config(path: str | os.PathLike, parse: Callable[[Any, Path], ConfigT]) -> ConfigT:
    """A YAML config file (safe_load only, a key written twice refused) through `parse(data, its folder)`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read config {path}: {err.strerror or err}") from None
    return parse(load_yaml(text, str(path)), path.parent)


def load_config(path: str | os.PathLike) -> RunConfig:
    """Read and validate a YAML config (safe_load only, a key written twice refused); relative paths are taken
    from its folder."""
    return read_config(path, parse_config)


def check_paths(config: RunConfig) -> None:
    """Every path the config names must be usable before any work starts; an error names the key.

    Source patterns must each match a file; what a pattern matches must be readable files inside the folder the
    pattern starts from (a broken symlink or a symlink loop among the matches, a `**` walk through a symlink to
    one of its own ancestors, or a match that is a symlink to a file outside that folder is an error, so no file
    is read from outside the configured paths); no file may be matched by two sources (`_overlap_problems`); every
    file a stage's config names must be a file, and pass the stage's own check (`_stage_path_problems`).
    """
    problems = []
    # Each pattern's matches, listed once for the checks here, the overlaps and the run (`validated_listing`; on a
    # store, a request per thousand objects).
    listed: dict[str, Any] = {}
    for i, source in enumerate(config.sources):
        for j, pattern in enumerate(source.paths):
            key = f"sources[{i}].paths[{j}]"
            trouble, listed[pattern] = checked_matches(config, pattern)
            if trouble:
                problems += [f"  {key}: {t}" for t in trouble]
            elif not listed[pattern]:
                where = uris.where_listed(pattern) if uris.is_remote(pattern) else config.base_dir
                problems.append(f"  {key}: {pattern!r} matches no file (looked in {where})")
        if source.root is not None and uris.is_remote(source.root):
            # An object store has no folders to check: ids are the keys below this prefix.
            problem = uris.uri_problem(source.root)
            if problem:
                problems.append(f"  sources[{i}].root: {problem}")
        elif source.root is not None and not config.resolve(uris.local_part(source.root)).is_dir():
            problems.append(f"  sources[{i}].root: {source.root!r} is not a folder")
        elif source.root is None and len({uris.is_remote(p) for p in source.paths}) > 1:
            problems.append(f"  sources[{i}].paths: local files and object-store URIs in one source have no common "
                            f"folder for the document ids; set sources[{i}].root, or make them two sources")
        if source.root is not None:  # ids are paths below the root: a local root holds no object, nor a URI a file
            astray = [j for j, p in enumerate(source.paths) if uris.is_remote(p) != uris.is_remote(source.root)]
            if astray:
                kind = "a folder URI" if uris.is_remote(source.root) else "a local folder"
                problems.append(f"  sources[{i}].root: {source.root!r} is {kind}, but sources[{i}].paths[{astray[0]}] "
                                f"{source.paths[astray[0]]!r} is not below it; set a root of the paths' kind, or "
                                f"make them two sources")
    if not problems:  # never glob a pattern found unsafe (a `**` through a symlink loop lists names without end)
        problems += _overlap_problems(config, listed)
    problems += _stage_path_problems(config)
    from tokenmill.pipeline.runfolder import output_problems  # the output folder and sources that reach into it

    problems += output_problems(config, listed)
    if problems:
        raise ConfigError(uris.display_uri("invalid config:\n" + "\n".join(problems)))
    config._listed = (config.base_dir, listed)


def _overlap_problems(config: RunConfig, listed: Mapping[str, Iterable[Path | str]]) -> list[str]:
    """Files that the patterns of two sources both match, one problem per pair of sources.

    Refused rather than given to the first source that claims them: which source a file belongs to decides its
    reader, encoding, language, fraction and ids, so "the first in config order wins" would let a reordering of
    `sources` silently change how files are read (a broad `data/**/*.jsonl` declared before `data/zh/*.jsonl`
    would take the Chinese files as English), and a warning in a worker's log is easy to miss. Read by both, the
    documents would be ingested twice. Overlap inside one source is harmless (its files are listed once).
    `listed`: each pattern's matches, as `check_paths` listed them.
    """
    owner: dict[Path | str, int] = {}
    shared: dict[tuple[int, int], list[Path | str]] = {}
    for i, source in enumerate(config.sources):
        for f in matched_files(config, source, listed):
            first = owner.setdefault(f, i)
            if first != i:
                shared.setdefault((first, i), []).append(f)
    problems = []
    for (first, i), files in shared.items():
        a, b = config.sources[first].name, config.sources[i].name
        problems.append(f"  sources[{i}].paths: {len(files)} file(s) of source {b!r} are also matched by source "
                        f"{a!r} (sources[{first}]), e.g. {files[0]}; each would be read twice. Narrow the patterns "
                        f"so that every file belongs to one source")
    return problems


def _stage_path_problems(config: RunConfig) -> list[str]:
    """Every file a configured stage's `paths` name must be a file; then what the stage's own `config_problems`
    finds (a tokenizer that does not load), so a bad one stops the run before ingest, not after it."""
    classes = registry.stage_classes()
    problems = []
    for name, stage_config in config.stages.configured():
        cls = classes[name]
        missing = [f"  stages.{name}.{key}: {path!r} is not a file (looked in {config.base_dir})"
                   for declared in cls.paths for key, path in config_paths(stage_config, declared)
                   if not config.resolve(path).is_file()]
        problems += missing or [f"  {p}" for p in cls.config_problems(stage_config, config.resolve)]
    return problems


def run_context(config: RunConfig) -> RunContext:
    """What every stage of a run shares: its seed, its sources by name, the folder relative paths start from."""
    return RunContext(seed=config.seed, sources={s.name: s for s in config.sources}, base_dir=config.base_dir)


def build_stages(config: RunConfig) -> list[Stage]:
    """The source stage followed by every configured stage, in pipeline order."""
    run = run_context(config)
    classes = registry.stage_classes()
    stages: list[Stage] = [registry.source_stage().build(config, run)]
    for name, stage_config in config.stages.configured():
        stages.append(classes[name](stage_config, run))
    return stages
