"""Look at what a run did: small functions over a run folder (the config's ``output``) and a training output folder,
for notebooks (``notebooks/``) and for ``tokenmill inspect``. They return plain rows (lists of dicts), Arrow tables
or numpy arrays (``scan_docs``: a polars LazyFrame over a stage's shards); ``tokenmill.inspect.plots`` turns them
into matplotlib figures and ``table(rows)`` displays rows.

``run=None`` means ``$TOKENMILL_RUN``, else the demo run ``build/demo/run`` (``runs.DEFAULT_RUN``); ``output=None``
in the training helpers means ``$TOKENMILL_TRAIN``.
"""

from tokenmill.inspect.clusters import cluster_sizes, cluster_summary, clusters, largest_clusters
from tokenmill.inspect.contamination import contamination_hits, evalset_summary, hit_examples, hits
from tokenmill.inspect.runs import DEFAULT_RUN, manifest, read_docs, run_dir, scan_docs, stages
from tokenmill.inspect.samples import (before_after, cleaned_ids, drop_counts, escape_leaks, leak_summary, samples,
                                       samples_per_reason, samples_per_source)
from tokenmill.inspect.scores import around_threshold, classifier_report, classifier_summary, ranked, score_columns
from tokenmill.inspect.subdoc import removed_span_summary, removed_spans
from tokenmill.inspect.tables import table
from tokenmill.inspect.tokens import (decoded_samples, document_lengths, length_histogram, length_percentiles,
                                      token_counts, token_index)
from tokenmill.inspect.training import event_documents, loss_segments, training_events, training_metrics

__all__ = [
    "DEFAULT_RUN", "run_dir", "stages", "manifest", "read_docs", "scan_docs",
    "samples", "samples_per_source", "samples_per_reason", "drop_counts", "before_after", "cleaned_ids",
    "escape_leaks", "leak_summary",
    "ranked", "score_columns", "classifier_report", "classifier_summary", "around_threshold",
    "clusters", "cluster_sizes", "cluster_summary", "largest_clusters",
    "removed_spans", "removed_span_summary",
    "token_index", "token_counts", "document_lengths", "length_histogram", "length_percentiles", "decoded_samples",
    "hits", "contamination_hits", "evalset_summary", "hit_examples",
    "training_metrics", "training_events", "event_documents", "loss_segments",
    "table",
]
