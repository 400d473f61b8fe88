"""`deterministic` (on by default): deterministic CUDA kernels asked for before the first matrix product, nothing
changed on the CPU, and a resume may switch it (kernels, not what is computed)."""

from __future__ import annotations

import os

import pytest
import torch

from tokenmill.train.determinism import CUBLAS_WORKSPACE, REFUSED, explained, set_determinism


@pytest.fixture
def torch_flags(monkeypatch):
    """The process-wide flags set_determinism touches, put back after the test."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2], before[3]


def _flags() -> tuple:
    return (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
            os.environ.get("CUBLAS_WORKSPACE_CONFIG"))


def test_on_a_cuda_device_the_kernels_are_made_deterministic(torch_flags):
    # No GPU is needed to set the flags: what a CUDA run would be asked for, checked here.
    set_determinism(True, torch.device("cuda", 0))
    assert _flags() == (True, True, CUBLAS_WORKSPACE)
    # Strict: warn_only would keep cuDNN attention, whose backward differs run to run (seen on an H200)
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.benchmark is False


def test_off_or_on_the_cpu_nothing_changes(torch_flags):
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False
    set_determinism(False, torch.device("cuda", 0))
    set_determinism(True, torch.device("cpu"))
    assert _flags() == (False, False, None)


def test_a_user_s_own_cublas_setting_is_kept(torch_flags, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    set_determinism(True, torch.device("cuda", 0))
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_a_resume_may_switch_it(tmp_path, capsys):
    """Which kernels run is not what is computed: a run resumed with `deterministic: false` goes on (as a
    checkpoint from before the option, which has no such key, does), where a changed `dropout` stops it."""
    from tests.train.runs import config, write_config, write_tokens
    from tokenmill.cli import main

    tokens = write_tokens(tmp_path / "tokens")
    cfg = config(tokens, tmp_path / "out", steps=2, warmup_steps=1, checkpoint_every=2, eval_every=0)
    assert "deterministic" not in cfg
    assert main(["train", str(write_config(tmp_path / "a.yaml", cfg))]) == 0
    switched = {**cfg, "steps": 3, "deterministic": False}
    assert main(["train", str(write_config(tmp_path / "b.yaml", switched))]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["train", str(write_config(tmp_path / "c.yaml", {**switched, "steps": 4, "dropout": 0.2}))]) != 0
    assert "of a run with another dropout" in capsys.readouterr().err


def test_an_operation_with_no_deterministic_kernel_is_named_with_the_option(tmp_path, capsys, monkeypatch):
    """PyTorch's refusal (strict mode, on a GPU) stops the run with one line that says which option lets it run;
    any other RuntimeError stays as it was."""
    from tests.train.runs import config, write_config, write_tokens
    from tokenmill.cli import main
    from tokenmill.train import trainer

    refusal = RuntimeError(f"scatter_add_cuda_kernel {REFUSED}, but you set 'torch.use_deterministic_algorithms(True)'")
    wrapped = ValueError("outer")
    wrapped.__cause__ = refusal
    assert "`deterministic: false`" in str(explained(wrapped)) and "scatter_add_cuda_kernel" in str(explained(wrapped))
    assert explained(RuntimeError("CUDA out of memory")) is None

    def refused(*args, **kwargs):
        raise refusal

    monkeypatch.setattr(trainer, "train_step", refused)
    tokens = write_tokens(tmp_path / "tokens")
    cfg = config(tokens, tmp_path / "out", steps=2, warmup_steps=1, checkpoint_every=2, eval_every=0)
    assert main(["train", str(write_config(tmp_path / "a.yaml", cfg))]) != 0
    err = capsys.readouterr().err
    assert "no deterministic GPU kernel" in err and "set `deterministic: false`" in err and "Traceback" not in err
