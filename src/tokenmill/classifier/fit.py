"""fastText's supervised training, alone in a child process: `python -m tokenmill.classifier.fit TRAIN MODEL ARGS`.

Why a process of its own, every allocation zeroed: fastText (fasttext-numpy2 0.10.4, as fastText's own source)
reads memory it never wrote. With one thread, `DenseMatrix::uniform` initializes only the first tenth of the input
matrix (a tenth per thread) and leaves the rest as malloc returned it (`AlignedVector` does not clear), and some
smaller buffer is read unwritten too. Memory fresh from the kernel is zeros, and every tokenmill model so far was
trained from those; memory that malloc hands out again holds what was freed there, and the training then stops with
"Encountered NaN" or gives other bytes: a second `train_supervised` in one process did, and so does a first one on
2,000 short lines (bucket 1000, dim 8 or the defaults). So each training runs in a fresh interpreter with glibc's
`perturb` set to 255, which fills every block malloc returns with zeros, and its per-thread cache off (a cached block
would skip that): every byte fastText reads unwritten is 0, whatever ran before; the demo's model is the same bytes
with and without it. Other C libraries ignore the setting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError

ZEROED_MALLOC = "glibc.malloc.perturb=255:glibc.malloc.tcache_count=0"
"""glibc tunables: every block malloc returns is filled with 255 ^ 0xff = 0 (mallopt's M_PERTURB), the per-thread
cache, which returns blocks without filling them, off."""
NAN_HINT = "the training diverged: lower fasttext.lr (to half, say) or fasttext.epoch"


class TrainingFailed(TokenmillError):
    """fastText's training stopped with an error (a diverged loss, a file it could not read)."""


def fit(train_file: Path, model_file: Path, arguments: dict[str, Any]) -> None:
    """Train on `train_file` with `train_supervised(**arguments)` in a child process and save to `model_file`."""
    done = subprocess.run([sys.executable, "-m", __name__, str(train_file), str(model_file), json.dumps(arguments)],
                          capture_output=True, text=True, env=_zeroed_malloc_env())
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or ["no message"])[-1].rstrip(".")
        hint = f"; {NAN_HINT}" if "NaN" in message else ""
        raise TrainingFailed(f"fastText training failed (exit {done.returncode}): {message}{hint}")


def _zeroed_malloc_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GLIBC_TUNABLES"] = ":".join(filter(None, (env.get("GLIBC_TUNABLES"), ZEROED_MALLOC)))
    return env


def main(argv: list[str]) -> int:
    import fasttext

    train_file, model_file, arguments = argv[0], argv[1], json.loads(argv[2])
    fasttext.train_supervised(input=train_file, **arguments).save_model(model_file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
