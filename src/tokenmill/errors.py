"""Typed errors that tokenmill raises on user input, so the CLI can print them without a traceback."""


class TokenmillError(Exception):
    """Base of every error that is the user's to fix (config, input, state of a run directory)."""


class ConfigError(TokenmillError):
    """A config is invalid; raised before any work starts. The message names the key."""


class StageChainError(ConfigError):
    """A stage needs a column or an input that no earlier stage provides."""


class ManifestError(TokenmillError):
    """A manifest is missing, unreadable, or breaks conservation (in = kept + drops)."""


class StageFailed(TokenmillError):
    """Some tasks of a stage kept failing after retries; the others finished and are committed."""

    def __init__(self, stage: str, failures: list[tuple[str, str]]):
        self.stage = stage
        self.failures = failures
        lines = "\n".join(f"  - {task}: {error}" for task, error in failures)
        super().__init__(
            f"stage {stage!r}: {len(failures)} task(s) failed after retries "
            f"(the others are committed; rerun to retry only these):\n{lines}"
        )
