"""Multiple-choice scoring equals lm-evaluation-harness's: its own task configs, metrics and evaluator, run offline on
the shared eval-set files, with the bundled model wrapped as its `LM`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.conftest import SHARED_DATA
from tokenmill.ablate.config import TaskConfig
from tokenmill.ablate.scoring import Scorer, score_items
from tokenmill.ablate.tasks import read_items

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the datasets are local files: never look for them online
os.environ.setdefault("HF_HUB_OFFLINE", "1")
lm_eval = pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (the `test` extra has it)")

ITEMS = 30
EVALSETS = SHARED_DATA / "evalsets"


@pytest.fixture(scope="module")
def scorer():
    """opt-tiny, randomly initialised, with a 400-token BPE trained on the eval sets' own text (a small vocabulary
    keeps the scoring fast; the harness takes any tokenizer)."""
    from tokenmill.tokenize.tokenizer import train_bpe
    from tokenmill.train.model import build_model, model_config

    if not EVALSETS.is_dir():
        pytest.skip(f"the shared eval sets are not at {EVALSETS}")
    texts = [line for f in ("llmfoundry_arc_easy.jsonl", "llmfoundry_piqa.jsonl")
             for line in (EVALSETS / f).read_text().splitlines()[:200]]
    tok = train_bpe(texts, 400)
    model = build_model(model_config("opt-tiny", vocab_size=448, max_seq_len=128))
    model.init_weights(torch.Generator().manual_seed(0))
    return Scorer(model, tok, seq_len=128)


def _harness_lm(scorer: Scorer):
    from lm_eval.api.model import LM

    class TokenmillLM(LM):
        """The bundled decoder as the harness's `LM`: log-likelihoods from `Scorer`; nothing else is asked here."""

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            return scorer.loglikelihoods([r.args for r in requests])

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError

        def generate_until(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError

    return TokenmillLM()


def _harness_task(name: str, yaml_rel: str, docs: list[dict], tmp_path: Path):
    """The harness's own task config (prompt template, choices, target, metrics) with its dataset replaced by local
    records in the shape its template reads (the HF dataset's fields): nothing is downloaded."""
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    tasks_dir = Path(lm_eval.__file__).parent / "tasks"
    config = load_yaml(tasks_dir / yaml_rel)  # the harness's loader: `!function` resolved, includes merged
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    for key in ("training_split", "validation_split", "fewshot_split", "dataset_name"):
        config.pop(key, None)
    config.update(task=name, dataset_path="json", dataset_kwargs={"data_files": {"test": str(data)}},
                  test_split="test", num_fewshot=0)
    return ConfigurableTask(config=config)


def _arc_docs(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines()[:ITEMS]:
        r = json.loads(line)
        labels = [chr(ord("A") + i) for i in range(len(r["choices"]))]
        out.append({"question": r["query"].removeprefix("Question:").strip(),
                    "choices": {"text": r["choices"], "label": labels}, "answerKey": labels[r["gold"]]})
    return out


def _piqa_docs(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines()[:ITEMS]:
        r = json.loads(line)
        out.append({"goal": r["query"].removeprefix("Question:").strip(), "sol1": r["choices"][0],
                    "sol2": r["choices"][1], "label": r["gold"]})
    return out


def _hellaswag_docs(path: Path) -> list[dict]:
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    for k in range(ITEMS):
        block = lines[6 * k: 6 * k + 6]
        label, _, ctx = block[0].partition(": ")
        out.append({"activity_label": label, "ctx_a": ctx, "ctx_b": "", "ctx": ctx, "endings": block[2:],
                    "label": block[1].strip(), "ind": k, "split": "val", "split_type": "indomain",
                    "source_id": str(k)})
    return out


CASES = [
    ("arc_easy", "arc/arc_easy.yaml", "llmfoundry_arc_easy.jsonl", "arc", _arc_docs),
    ("piqa", "piqa/piqa.yaml", "llmfoundry_piqa.jsonl", "piqa", _piqa_docs),
    ("hellaswag", "hellaswag/hellaswag.yaml", "hellaswag_val_full.txt.gz", "hellaswag_text", _hellaswag_docs),
]


# arc_easy in `make test`; piqa and hellaswag (another prompt shape, four endings) in `make test-all`: 8-17 s each.
@pytest.mark.parametrize("name,yaml_rel,file,fmt,docs",
                         [pytest.param(*c, marks=() if c[0] == "arc_easy" else pytest.mark.long) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_acc_and_acc_norm_equal_the_harness(name, yaml_rel, file, fmt, docs, scorer, tmp_path):
    from lm_eval.evaluator import evaluate

    path = EVALSETS / file
    if not path.is_file():
        pytest.skip(f"{path} not found")
    items = read_items(TaskConfig(name=name, path=str(path), format=fmt, max_items=ITEMS), path)
    task = _harness_task(name, yaml_rel, docs(path), tmp_path)
    # The harness's own requests: the same (context, continuation) pairs as ours, in the same order.
    task.build_all_requests(limit=None, rank=0, world_size=1)
    theirs = [inst.args for inst in sorted(task.instances, key=lambda i: (i.doc_id, i.idx))]
    ours = [(c, x) for item in items for c, x in zip(item.contexts, item.continuations)]
    assert theirs == ours
    results = evaluate(lm=_harness_lm(scorer), task_dict={name: task}, bootstrap_iters=0,
                       log_samples=False)["results"][name]
    mine = score_items(scorer, items)
    for metric in ("acc", "acc_norm"):
        assert results[f"{metric},none"] == pytest.approx(sum(m[metric] for m in mine) / len(mine), abs=1e-12)
    assert 0 < sum(m["p_correct"] for m in mine) / len(mine) < 1
