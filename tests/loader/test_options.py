"""The loader's options block is `TokenLoader`'s own keyword options, with its defaults: one owner, so every option
reaches a train config's `loader:` block."""

from __future__ import annotations

import inspect

import pytest
from pydantic import ValidationError

from tokenmill.loader import TokenLoader
from tokenmill.loader.options import LoaderOptions

CALLER_OWNS = {"self", "paths", "seq_len", "global_batch_size", "micro_batch_size", "seed", "rank", "world_size",
               "weights", "split", "pin_memory"}
"""What the caller (the trainer) gives from its own settings or the device: the batch layout, the data, the seed."""


def test_every_keyword_option_of_the_loader_is_a_field_with_the_same_default():
    params = {name: p.default for name, p in inspect.signature(TokenLoader.__init__).parameters.items()
              if name not in CALLER_OWNS}
    assert set(params) == set(LoaderOptions.model_fields), "an option of TokenLoader is missing from LoaderOptions"
    assert {name: f.default for name, f in LoaderOptions.model_fields.items()} == params
    assert LoaderOptions.RESUMABLE <= set(LoaderOptions.model_fields)
    assert all(f.description for f in LoaderOptions.model_fields.values())


@pytest.mark.parametrize("bad", [{"shuffle_block": 0}, {"shuffle_block": True}, {"shuffle_block": "files"},
                                 {"shuffle_window": 0}, {"num_workers": -1}, {"cache_bytes": 0},
                                 {"fetch_timeout": 0}, {"prefetch_bytes": -5}, {"workers": 2}])
def test_a_bad_option_is_refused_naming_it(bad):
    with pytest.raises(ValidationError, match=next(iter(bad))):
        LoaderOptions.model_validate(bad)


def test_a_stuck_worker_past_worker_timeout_is_a_data_error_naming_the_option(tmp_path, monkeypatch):
    """A worker that builds no micro-batch in time stops the rank with a DataError naming the option, not the
    DataLoader's own error; a negative timeout is refused when the loader is built."""
    import time

    import numpy as np

    from tests.loader.tokens import labelled_docs, write_dataset
    from tokenmill.loader import DataError
    from tokenmill.loader import loader as loader_module

    rng = np.random.default_rng(0)
    path = write_dataset(tmp_path / "tokens", {"a": labelled_docs(40, rng)})
    built = loader_module._Plan.micro_batch

    def stuck(self, k, m):  # every micro-batch takes 3 s (the forked worker has this patch too)
        time.sleep(3)
        return built(self, k, m)

    monkeypatch.setattr(loader_module._Plan, "micro_batch", stuck)
    loader = TokenLoader([str(path)], seq_len=16, global_batch_size=4, num_workers=1, seed=3, worker_timeout=1.0)
    with pytest.raises(DataError, match=r"built no micro-batch in 1 s \(worker_timeout\)"):
        next(iter(loader))
    loader.close()
    with pytest.raises(Exception, match="worker_timeout"):
        TokenLoader([str(path)], seq_len=16, global_batch_size=4, worker_timeout=-1.0)
