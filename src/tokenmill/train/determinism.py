"""Deterministic GPU kernels for a run, so that a rerun and a resume give bit-identical losses on a GPU too."""

from __future__ import annotations

import logging
import os

import torch

from tokenmill.train.errors import EveryRankError, error_chain

log = logging.getLogger(__name__)

CUBLAS_WORKSPACE = ":4096:8"
"""cuBLAS's fixed workspace configuration that its documentation names for reproducible results: without it, and
with deterministic algorithms on, PyTorch refuses every cuBLAS call."""

REFUSED = "does not have a deterministic implementation"
"""What PyTorch says when an operation has no deterministic kernel and deterministic algorithms are on."""


def set_determinism(deterministic: bool, device: torch.device) -> None:
    """On a CUDA device, ask PyTorch for deterministic kernels (as torchtitan's `debug.deterministic`): cuDNN's
    attention left out of `scaled_dot_product_attention`'s choice, flash and memory-efficient attention's backward
    passes without atomics, cuBLAS with a fixed workspace, no cuDNN autotuning.

    Strict, not ``warn_only``: with ``warn_only`` PyTorch keeps the non-deterministic kernels and only warns. On an
    H200 (torch 2.11) it then picked cuDNN attention, whose backward differs run to run: two runs' losses differed
    by 1.9e-5 (opt-125m) and 4.3e-5 (llama-125m) by step 10 (`benchmarks/gpu_check.py`, 2026-11-28). An operation
    with no deterministic kernel at all then stops the run, and :func:`explained` names the option that lets it
    run. Called before the first CUDA matrix product of the process (cuBLAS reads its workspace setting when its
    handle is made). On the CPU nothing changes: its kernels are deterministic already (the CPU tests compare
    losses bit for bit).
    """
    if device.type != "cuda":
        return
    if not deterministic:
        log.info("deterministic: false: GPU kernels may differ in the last bits from run to run")
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def explained(err: BaseException) -> EveryRankError | None:
    """PyTorch's refusal of an operation with no deterministic kernel (in ``err``'s chain) as an error that names
    the option (every rank runs the same operations, so every rank meets it); None for any other error."""
    found = next((e for e in error_chain(err) if isinstance(e, RuntimeError) and REFUSED in str(e)), None)
    if found is None:
        return None
    return EveryRankError(f"an operation of this run has no deterministic GPU kernel ({str(found).splitlines()[0]}); "
                          "set `deterministic: false` in the train config to run it with the fastest kernels "
                          "(losses then differ from run to run in the last bits, and a resume is not bit-identical)")
