"""The conformance run's inputs: one source per readable file of ../shared/data, code files, evaluation sets and
the two tokenizers (GPT-2 as shipped, and GPT-2 with GPT-NeoX-style added space runs and special tokens).

Nothing is copied from ../shared/data: sources name its files by absolute path. Only the code documents (a
deterministic sample of the standard library's `.py` files and the repository's Makefile) and the second tokenizer
are written into the run's temporary folder.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]

# Share of each large file kept by the sample stage (ingest reads every record of every file; the later stages see
# this share). Tuned so that the whole module stays under ~90 s on 2 cores; every file still gives documents.
# dolma is read whole: its 35 exact duplicates are what dedup removes.
FRACTIONS = {"pearl": 0.06, "drunk": 0.01, "cmrc": 0.05, "thucnews": 0.02, "senti": 0.02, "msr": 0.02}
# Below the 0.70 word 5-gram Jaccard of the two scans of one book in dups/textreuse_ats (remember00palm and
# remembermeorholy00palm), above every other pair of that folder (0.47 at most): near-duplicate removals happen.
DEDUP_THRESHOLD = 0.6

CODE_FILES = 40
CODE_MAX_BYTES = 24_000
SPECIAL_TOKENS = ["<|padding|>", "<|im_start|>"]
SPACE_RUNS = [" " * n for n in range(2, 25)]  # as GPT-NeoX-20B: "  " ... 24 spaces, non-special added tokens


def sources(data: Path, code: Path) -> list[dict]:
    """One source per readable file or group of like files; every file named here is read by its reader."""
    d = str(data)
    return [
        {"name": "pile", "format": "pile", "paths": [f"{d}/pile/the_pile_hf_dummy_train00.jsonl.zst",
                                                     f"{d}/pile/the_pile_hf_dummy_val.jsonl.zst"]},
        {"name": "pearl", "format": "json", "paths": [f"{d}/pile/pearl_pile_texts.json"]},
        {"name": "dolma", "format": "jsonl",
         "paths": [f"{d}/commoncrawl/dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz"],
         "id_field": "id", "language": "any"},
        {"name": "cc_wet", "format": "cc_wet", "paths": [f"{d}/commoncrawl/CC-MAIN-2016-50_filter_test_1.warc.wet.gz",
                                                         f"{d}/commoncrawl/whirlwind.warc.wet.gz"], "language": "any"},
        {"name": "cc_warc", "format": "cc_warc", "paths": [f"{d}/commoncrawl/whirlwind.warc.gz",
                                                           f"{d}/commoncrawl/dolma_wget_sample-0000.warc.gz"],
         "language": "any"},
        {"name": "reddit", "format": "reddit", "paths": [f"{d}/reddit/pushshift_test_comments.ndjson",
                                                         f"{d}/reddit/pushshift_test_submissions.ndjson"],
         "max_window_log": 31},
        # No id_field: the file's `id` column repeats (374 ids on up to 50 rows each), so positional ids keep every
        # document traceable through dedup clusters and token side files.
        {"name": "drunk", "format": "csv", "paths": [f"{d}/reddit/reddit_lifestyle_drunk.csv"],
         "subset_field": "subreddit",
         "options": {"columns": ["index", "text", "id", "subreddit", "meta", "time", "author", "ups", "downs",
                                 "authorlinkkarma", "authorkarma", "authorisgold"]}},
        {"name": "cmrc", "format": "json", "paths": [f"{d}/chinese/cmrc2018_dev.json"], "text_field": "context",
         "id_field": "id", "language": "zh", "options": {"items": "data.item.paragraphs.item"}},
        {"name": "thucnews", "format": "tsv", "paths": [f"{d}/chinese/thucnews_cnews.val.txt"], "subset_field": "label",
         "language": "zh", "options": {"header": False, "columns": ["label", "text"], "quoting": "none"}},
        {"name": "senti", "format": "csv", "paths": [f"{d}/chinese/ChnSentiCorp_htl_all.csv"], "text_field": "review",
         "language": "zh"},
        {"name": "ats", "format": "text", "paths": [f"{d}/dups/textreuse_ats/*.txt"]},
        {"name": "legal", "format": "text", "paths": [f"{d}/dups/textreuse_legal/*.txt"]},
        {"name": "msr", "format": "tsv", "paths": [f"{d}/dups/msr_paraphrase_train.txt"],
         "text_field": ["#1 String", "#2 String"], "options": {"quoting": "none"}},
        {"name": "code", "format": "jsonl", "paths": [str(code)], "id_field": "id", "language": "any"},
    ]


EVALSETS = [
    ("gsm8k", "gsm8k_test.jsonl", "gsm8k"), ("humaneval", "HumanEval.jsonl.gz", "humaneval"),
    ("hellaswag", "hellaswag_val_full.txt.gz", "hellaswag_text"),
    ("lambada", "llmfoundry_lambada_openai.jsonl", "lambada"),
    ("piqa", "llmfoundry_piqa.jsonl", "piqa"), ("winogrande", "llmfoundry_winogrande.jsonl", "winogrande"),
    ("arc_easy", "llmfoundry_arc_easy.jsonl", "arc"), ("arc_challenge", "llmfoundry_arc_challenge.jsonl", "arc"),
    ("triviaqa", "llmfoundry_triviaqa_sm_sub.jsonl", "triviaqa"),
]

# Code is kept as a user keeps a code source: no quality rules (written for prose) and escapes only counted.
CODE_OVERRIDE = {"source": "code", "escapes": {"mode": "flag"},
                 "quality": {"gopher_quality": None, "gopher_repetition": None, "c4": None, "cjk": None}}
SHORT_FORM = {"gopher_quality": {"min_doc_words": 5, "min_stop_words": 1, "max_non_alpha_words_ratio": 0.6},
              "gopher_repetition": None, "c4": {"min_num_sentences": 1}}
# r/drunk was lowercased and stripped of punctuation by its scraper: no sentences, no rule for prose fits.
SCRAPED = {"gopher_quality": {"min_doc_words": 1, "min_stop_words": 0, "min_avg_word_length": None},
           "gopher_repetition": None, "c4": None}
# Whole OCR books: longer than Gopher's 100,000 words, page headers repeat, OCR junk counts as non-words.
OCR_BOOKS = {"gopher_quality": {"max_doc_words": None, "max_non_alpha_words_ratio": 0.5}, "gopher_repetition": None}


def code_files() -> dict[str, Path]:
    """A deterministic sample of the standard library's `.py` files, and the repository's Makefile; {id: file}."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    candidates = sorted(p for p in stdlib.glob("*.py") if 2_000 <= p.stat().st_size <= CODE_MAX_BYTES)
    step = max(1, len(candidates) // CODE_FILES)
    chosen = {f"stdlib/{p.name}": p for p in candidates[::step][:CODE_FILES]}
    chosen["Makefile"] = REPO / "Makefile"
    return chosen


def write_code(dest: Path) -> dict[str, str]:
    """The code documents as one JSON-lines file (one shard, not one per file); {id: the file's exact text}."""
    texts = {}
    for doc_id, path in code_files().items():
        with open(path, encoding="utf-8", newline="") as f:  # newline="": CRLF and lone CR stay as they are
            texts[doc_id] = f.read()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w", encoding="utf-8") as f:
        for doc_id, text in texts.items():
            f.write(json.dumps({"id": doc_id, "text": text}) + "\n")
    return texts


def write_tokenizer(dest: Path, gpt2: Path) -> Path:
    """GPT-2 plus non-special added tokens for runs of 2-24 spaces and two special tokens, saved as tokenizer.json."""
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(str(gpt2))
    tok.add_tokens([AddedToken(run, special=False, normalized=False) for run in SPACE_RUNS])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    dest.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(dest))
    return dest


def code_override() -> dict:
    """CODE_OVERRIDE, plus whitespace kept as code's own where the clean stage lets a source say it holds code."""
    from tokenmill.stages.clean.config import CleanOverride

    if "normalize" in CleanOverride.model_fields:
        return {**CODE_OVERRIDE, "normalize": {"code": "document"}}
    return CODE_OVERRIDE


def write_config(root: Path, data: Path, tokenizer: str, output: str, fractions: dict[str, float] = FRACTIONS) -> Path:
    """The run config, `root/<output>.yaml`, writing into `root/<output>`."""
    srcs = sources(data, root / "code.jsonl")
    for s in srcs:
        if s["name"] in fractions:
            s["fraction"] = fractions[s["name"]]
    config = {
        "output": output,
        "seed": 16,
        "sources": srcs,
        "ingest": {"docs_per_shard": 30_000},  # one shard per file: tokenize costs ~0.5 s a shard
        "stages": {
            "sample": {},
            "clean": {"overrides": [code_override(), {"source": "reddit", "quality": SHORT_FORM},
                                    {"source": "drunk", "quality": SCRAPED},
                                    {"source": "ats", "quality": OCR_BOOKS},
                                    {"source": "msr", "quality": SHORT_FORM}]},
            "dedup": {"threshold": DEDUP_THRESHOLD},
            "decontaminate": {"evalsets": [{"name": n, "path": str(data / "evalsets" / f), "format": fmt}
                                           for n, f, fmt in EVALSETS]},
            "tokenize": {"tokenizer": tokenizer, "valid_fraction": 0.05},
        },
        "execution": {"workers": 2},
    }
    path = root / f"{output}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


# Records each source's files hold, as SOURCES.md counts them, less what a reader does not count as a record: WARC
# files hold warcinfo, request and metadata records besides the conversion (WET) and response/resource (WARC)
# records a reader reads (25 + 1 conversions; 1 + 22 responses + 2 resources). Ingest must see every one of them.
RECORDS = {"pile": 2, "pearl": 1000, "dolma": 697, "cc_wet": 26, "cc_warc": 25, "reddit": 27 + 31, "drunk": 21924,
           "cmrc": 848, "thucnews": 1000, "senti": 7766, "ats": 8, "legal": 3, "msr": 4076}
# Not read by any source: the WAT file holds only metadata records (JSON about a capture, no document text), and the
# evaluation sets and tokenizer files are inputs of decontaminate and tokenize.
NOT_SOURCES = ("commoncrawl/whirlwind.warc.wat.gz", "evalsets/", "tokenizer/", "SOURCES.md")
