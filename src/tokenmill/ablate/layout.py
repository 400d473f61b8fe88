"""Where an ablation folder keeps each of its files."""

from __future__ import annotations

from pathlib import Path

from tokenmill.ablate.config import AblateConfig

CONFIG_FILE = "ablate_config.json"
"""The resolved ablation config, in the ablation folder (what `tokenmill ablate report DIR` reads)."""
PLAN_FILE = "plan.json"
"""Per variant the stages shared and recomputed, and the held-out set's size: written before any training."""
HELDOUT_FILE = "heldout.json"
"""The held-out documents, per source: `[[id, text], ...]`."""


def proxy_dir(config: AblateConfig, variant: str, seed: int) -> Path:
    """One proxy run's folder (a `tokenmill train` output): one per variant and seed."""
    return config.output_dir / "proxies" / variant / f"seed-{seed}"
