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
