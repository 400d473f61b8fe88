"""Run under torchrun: one step's forward and backward through the trainer (FSDP2), full gradients saved by rank 0."""

import os
import sys

import torch
from torch.distributed.tensor import DTensor

from tokenmill.train.config import load_train_config
from tokenmill.train.distributed import setup
from tokenmill.train.gradients import forward_backward
from tokenmill.train.report import LogReporter
from tokenmill.train.run import Run

config_path, out = sys.argv[1], sys.argv[2]
config = load_train_config(config_path)
run = Run(config, LogReporter(config.log_every))
d = setup()
try:
    run.build(d)
    run.iterator = iter(run.loader)
    loss, batch = forward_backward(run, 1)
    grads = {name: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).detach().cpu()
             for name, p in run.model.named_parameters()}
    if d.main:
        torch.save({"loss": torch.tensor(loss), "batch": torch.tensor(batch), "grads": grads}, out)
    run.close()
finally:
    d.close()
# A backward with no optimizer step leaves FSDP holding gloo work objects; destroyed during interpreter
# finalization they can abort a rank ("terminate called without an active exception", 2 runs in about 60 here;
# pytorch/pytorch#179291). The result is saved and the group destroyed: leave without finalization.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
