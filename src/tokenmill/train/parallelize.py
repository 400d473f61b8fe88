"""FSDP2 over the device mesh: the model sharded per block (mixed precision, compile), its weights made by rank 0."""

from __future__ import annotations

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from tokenmill.train.distributed import Distributed
from tokenmill.train.llama import LlamaConfig
from tokenmill.train.model import Decoder, ModelConfig, build_model


def compute_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The config's ``dtype``: ``auto`` is bfloat16 on a GPU and float32 on the CPU."""
    return torch.bfloat16 if dtype == "bfloat16" or (dtype == "auto" and device.type == "cuda") else torch.float32


def parallelize(mcfg: ModelConfig | LlamaConfig, seed: int, dtype: torch.dtype, compile_blocks: bool,
                d: Distributed) -> Decoder:
    """Sharded per block then at the root (FSDP2) on several ranks, and filled with weights made by rank 0 from
    the seed alone: the same initial model whatever the world size. One rank trains the plain module (FSDP2
    over one rank only adds DTensor dispatch, about 7% of an opt-tiny step on CPU); its checkpoints hold plain
    tensors, which DCP reshards onto any world size, and back."""
    if d.world_size == 1:
        model = initial_model(mcfg, seed)
        if compile_blocks:
            for block in model.blocks:
                block.compile()
        return model.to(d.device)
    with torch.device("meta"):
        model = build_model(mcfg)
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype != torch.float32 \
        else MixedPrecisionPolicy()
    for i, block in enumerate(model.blocks):
        if compile_blocks:
            block.compile()
        # The last block's parameters are needed at once by the backward: keep them gathered.
        fully_shard(block, mesh=d.mesh, mp_policy=policy, reshard_after_forward=i < len(model.blocks) - 1)
    fully_shard(model, mesh=d.mesh, mp_policy=policy)
    model.to_empty(device=d.device)
    full = {}
    if d.main:
        full = initial_model(mcfg, seed).state_dict()
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    return model


def initial_model(mcfg: ModelConfig | LlamaConfig, seed: int) -> Decoder:
    """The initial weights, on the CPU, from the seed alone: built on the meta device (a module built on a real
    device initialises itself from the global RNG first), then filled through a seeded generator."""
    with torch.device("meta"):
        model = build_model(mcfg)
    model.to_empty(device="cpu")
    model.init_weights(torch.Generator().manual_seed(seed))
    return model


def autocast(device: torch.device, dtype: torch.dtype, sharded: bool) -> torch.autocast:
    """bf16 compute on one rank (FSDP2's MixedPrecisionPolicy does it when sharded); fp32 master weights."""
    return torch.autocast(device.type, dtype=dtype, enabled=not sharded and dtype != torch.float32)
