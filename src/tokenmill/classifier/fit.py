"""fastText's supervised training, alone in a child process: `python -m tokenmill.classifier.fit TRAIN MODEL ARGS`.

Why a process of its own: fasttext-numpy2 0.10.4 trains the same file to the same bytes in a fresh process, but a
second or third `train_supervised` in one process may stop with "Encountered NaN" (seen on the shared real data:
first call fine, later ones not, depending on what was trained and freed before), which points at state that the
library leaves behind in the process. A fresh interpreter per training makes every training the library's first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError

NAN_HINT = "the training diverged: lower fasttext.lr (to half, say) or fasttext.epoch"


class TrainingFailed(TokenmillError):
    """fastText's training stopped with an error (a diverged loss, a file it could not read)."""


def fit(train_file: Path, model_file: Path, arguments: dict[str, Any]) -> None:
    """Train on `train_file` with `train_supervised(**arguments)` in a child process and save to `model_file`."""
    done = subprocess.run([sys.executable, "-m", __name__, str(train_file), str(model_file), json.dumps(arguments)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or ["no message"])[-1].rstrip(".")
        hint = f"; {NAN_HINT}" if "NaN" in message else ""
        raise TrainingFailed(f"fastText training failed (exit {done.returncode}): {message}{hint}")


def main(argv: list[str]) -> int:
    import fasttext

    train_file, model_file, arguments = argv[0], argv[1], json.loads(argv[2])
    fasttext.train_supervised(input=train_file, **arguments).save_model(model_file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
