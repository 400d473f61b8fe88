"""Read one hostile case's files with its reader, alone in this process; print counts and peak RSS as JSON.

    python -m tests.hostile.read_case CORPUS_DIR CASE_NAME

The memory tests run this in a subprocess, so the peak is that of reading this case only.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
from pathlib import Path


def main(corpus: str, name: str) -> dict:
    from tokenmill.pipeline.config import parse_config
    from tokenmill.sources.patterns import source_files
    from tokenmill.sources.formats import READERS

    case = next(c for c in json.loads((Path(corpus) / "cases.json").read_text())["cases"] if c["name"] == name)
    config = parse_config({"output": "run", "sources": [case["source"]]}, corpus)
    source = config.sources[0]
    root, files = source_files(config, source)
    kept, drops, messages = 0, collections.Counter(), []
    for f in files:
        display = f"{source.name}:{os.path.relpath(f, root)}"
        for record in READERS[source.format].read(str(f), source, display):
            if record.drop is None:
                kept += 1
            else:
                drops[record.drop] += 1
                messages.append(record.message)
    return {"kept": kept, "drops": dict(drops), "messages": messages, "peak_rss_mb": round(peak_rss_mb(), 1)}


def peak_rss_mb() -> float:
    """This process's peak RSS since exec: VmHWM (ru_maxrss also counts the forked parent's pages before exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:3])))
