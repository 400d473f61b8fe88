"""The Llama-family decoder: logits against transformers' Llama, sizes, FLOPs, config, golden losses, FSDP2, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tokenmill.errors import ConfigError
from tokenmill.loader import TokenLoader
from tokenmill.train.config import load_train_config, parse_train_config
from tokenmill.train.llama import LlamaConfig, LlamaDecoder
from tokenmill.train.model import PRESETS, build_model, model_config
from tokenmill.train.run import padded_vocab
from tokenmill.train.trainer import KILL_AFTER_STEP_ENV, Trainer
from tests.train.runs import config, env, losses, metrics, torchrun, write_config, write_tokens

HERE = Path(__file__).parent
GOLDEN = HERE / "golden_losses_llama.json"
V, S = 97, 32


def tiny(**fields) -> LlamaDecoder:
    model = build_model(model_config({"preset": "llama-tiny", **fields}, vocab_size=V, max_seq_len=S))
    model.init_weights(torch.Generator().manual_seed(0))
    return model


def ids(b: int, t: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return write_tokens(tmp_path_factory.mktemp("llama-tokens"))


def llama_config(tokens: Path, output: Path, **overrides) -> dict:
    """`runs.config` with the Llama CPU size (and no dropout key: Llama has none, and refuses one above 0)."""
    return config(tokens, output, **{"model": "llama-tiny", **overrides})


def _hf_state(model: LlamaDecoder) -> dict[str, torch.Tensor]:
    """Our weights under transformers' names: the fused q|k|v and gate|up matrices split in their order."""
    cfg = model.cfg
    state = {"model.embed_tokens.weight": model.tok_emb.weight, "model.norm.weight": model.norm.weight}
    if model.output is not None:
        state["lm_head.weight"] = model.output.weight
    for i, block in enumerate(model.blocks):
        q, k, v = block.attn.qkv.weight.split([cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim,
                                               cfg.n_kv_heads * cfg.head_dim])
        gate, up = block.mlp.gate_up.weight.chunk(2)
        names = {"self_attn.q_proj": q, "self_attn.k_proj": k, "self_attn.v_proj": v,
                 "self_attn.o_proj": block.attn.out_proj.weight, "mlp.gate_proj": gate, "mlp.up_proj": up,
                 "mlp.down_proj": block.mlp.down.weight, "input_layernorm": block.attn_norm.weight,
                 "post_attention_layernorm": block.mlp_norm.weight}
        state.update({f"model.layers.{i}.{name}.weight": w for name, w in names.items()})
    return state


@pytest.mark.parametrize("tie", [False, True])
def test_logits_equal_transformers_llama(tie):
    """The reference implementation, weight for weight: RMSNorm, rotary (with restarted positions), grouped
    key/value heads, SwiGLU, the head tied or not. Document masking off: transformers' SDPA Llama attends across."""
    transformers = pytest.importorskip("transformers")
    model = tiny(tie_embeddings=tie, document_mask=False).eval()
    cfg = model.cfg
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=cfg.d_model, intermediate_size=cfg.ffn_dim, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads, max_position_embeddings=S,
        rms_norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta, tie_word_embeddings=tie, attention_bias=False,
        mlp_bias=False, attn_implementation="sdpa")).eval()
    missing, unexpected = hf.load_state_dict(_hf_state(model), strict=False)
    assert not unexpected and missing == (["lm_head.weight"] if tie else [])
    x = ids(2, 24)
    restarted = torch.cat([torch.arange(10), torch.arange(14)]).expand(2, 24)
    with torch.no_grad():
        for positions in (None, restarted):
            ours, theirs = model(x, position_ids=positions), hf(input_ids=x, position_ids=positions).logits
            assert torch.allclose(ours, theirs, rtol=0, atol=1e-5), (ours - theirs).abs().max()
    # Rotary follows the positions: restarting them changes the second part's logits.
    with torch.no_grad():
        assert not torch.allclose(model(x)[:, 10:], model(x, position_ids=restarted)[:, 10:])


def test_llama_1b_has_llama_3_2_1b_s_parameters():
    with torch.device("meta"):
        model = build_model(model_config("llama-1b", vocab_size=128256, max_seq_len=2048))
    assert isinstance(model, LlamaDecoder) and all(p.is_meta for p in model.parameters())
    assert model.num_params() == 1_235_814_400  # Llama-3.2-1B's count (tied head, 8 key/value heads)
    assert model.output_weight is model.tok_emb.weight
    qkv = model.blocks[0].attn.qkv.weight
    assert qkv.shape == ((32 + 2 * 8) * 64, 2048)


def test_no_biases_untied_head_and_weight_decay_groups():
    model = tiny()
    assert not [n for n, _ in model.named_parameters() if n.endswith("bias")]
    assert model.output_weight is model.output.weight and model.output_weight is not model.tok_emb.weight
    decay, no_decay = model.param_groups(0.1)
    decayed = {id(p) for p in decay["params"]}
    assert id(model.output.weight) in decayed and id(model.blocks[0].mlp.gate_up.weight) in decayed
    assert id(model.tok_emb.weight) not in decayed and id(model.norm.weight) not in decayed
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


@pytest.mark.parametrize("tie", [False, True])
def test_flops_per_token_counts_matmul_parameters_and_attention(tie):
    model = tiny(tie_embeddings=tie)
    cfg = model.cfg
    per_block = (cfg.d_model * (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim + cfg.d_model ** 2
                 + 3 * cfg.d_model * cfg.ffn_dim + 2 * cfg.d_model)
    matmuls = cfg.n_layers * per_block + cfg.d_model + V * cfg.d_model  # blocks, final norm, head
    assert model.num_params() == matmuls + (0 if tie else V * cfg.d_model)  # an untied embedding is a lookup
    assert model.num_params(exclude_embeddings=True) == model.num_params() - V * cfg.d_model
    assert model.flops_per_token(S) == 6 * matmuls + 12 * cfg.n_layers * cfg.d_model * S


def test_causal_and_sequence_length_checked():
    model = tiny().eval()
    x = ids(1, 20)
    y = x.clone()
    y[0, 12] = (y[0, 12] + 1) % V
    with torch.no_grad():
        assert torch.equal(model(x)[:, :12], model(y)[:, :12])
    with pytest.raises(ValueError, match="max_seq_len"):
        model(ids(1, S + 1))


def test_meta_build_then_init_is_the_seeded_model():
    """What the trainer does (parallelize.initial_model): meta, to_empty, init from a generator; no buffer is
    left unfilled (rotary has none)."""
    with torch.device("meta"):
        model = build_model(model_config("llama-tiny", vocab_size=V, max_seq_len=S))
    model.to_empty(device="cpu")
    model.init_weights(torch.Generator().manual_seed(0))
    assert not list(model.buffers())
    reference = tiny()
    with torch.no_grad():
        assert torch.equal(model(ids(2, 16)), reference(ids(2, 16)))


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="n_kv_heads"):
        model_config({"preset": "llama-tiny", "n_kv_heads": 3}, vocab_size=V, max_seq_len=S)
    with pytest.raises(ValueError, match="even head size"):
        model_config({"arch": "llama", "n_layers": 1, "d_model": 36, "n_heads": 4}, vocab_size=V, max_seq_len=S)
    with pytest.raises(ValueError, match=r"unknown llama model field\(s\) \['dropout'\]"):
        model_config("llama-tiny", vocab_size=V, max_seq_len=S, dropout=0.1)
    with pytest.raises(ValueError, match="contradicts"):
        model_config({"preset": "llama-tiny", "arch": "opt"}, vocab_size=V, max_seq_len=S)
    with pytest.raises(ValueError, match="need n_heads"):
        model_config({"arch": "llama", "n_layers": 1, "d_model": 64}, vocab_size=V, max_seq_len=S)
    with pytest.raises(ValueError, match="rope_theta"):
        model_config("llama-tiny", vocab_size=V, max_seq_len=S, rope_theta=0)
    with pytest.raises(ValueError, match="llama-1b"):
        model_config("llama-2b", vocab_size=V, max_seq_len=S)


def test_config_defaults():
    cfg = model_config({"arch": "llama", "n_layers": 2, "d_model": 768, "n_heads": 12}, vocab_size=V, max_seq_len=S)
    assert isinstance(cfg, LlamaConfig) and cfg.n_kv_heads == 12 and cfg.ffn_dim == 2048  # 8/3 d, to 256
    assert cfg.document_mask and not cfg.tie_embeddings and cfg.rope_theta == 500000.0
    assert model_config("llama-350m", vocab_size=V, max_seq_len=S).ffn_dim == 2816
    assert {name for name, p in PRESETS.items() if p["arch"] == "llama"} == {"llama-tiny", "llama-125m",
                                                                            "llama-350m", "llama-1b"}
    assert not model_config("opt-tiny", vocab_size=V, max_seq_len=S).document_mask


def test_train_config_takes_llama_and_refuses_what_it_lacks(tokens, tmp_path):
    cfg = parse_train_config(llama_config(tokens, tmp_path / "run"))
    assert cfg.loader_position_ids and not cfg.loader.position_ids  # asked of the loader by the model
    assert isinstance(cfg.resolved_model(padded_vocab(256)), LlamaConfig)
    off = parse_train_config(llama_config(tokens, tmp_path / "run", model={"preset": "llama-tiny",
                                                                           "document_mask": False}))
    assert not off.loader_position_ids
    assert not parse_train_config(config(tokens, tmp_path / "run")).loader_position_ids  # OPT: as asked
    with pytest.raises(ConfigError, match="dropout: 'llama-tiny' has no dropout"):
        parse_train_config({**llama_config(tokens, tmp_path / "run"), "dropout": 0.1})
    parse_train_config({**llama_config(tokens, tmp_path / "run"), "dropout": 0.0})
    with pytest.raises(ConfigError, match="loader.position_ids: false, but the model masks documents"):
        parse_train_config(llama_config(tokens, tmp_path / "run", loader={"position_ids": False}))
    with pytest.raises(ConfigError, match="model: Value error, LlamaConfig.n_heads"):
        parse_train_config(llama_config(tokens, tmp_path / "run", model={"preset": "llama-tiny", "n_kv_heads": 3}))
    with pytest.raises(ConfigError, match="unknown opt model field"):
        parse_train_config(config(tokens, tmp_path / "run", model={"n_layers": 2, "d_model": 64, "n_heads": 4,
                                                                   "n_kv_heads": 2}))


def test_first_losses_equal_the_golden_file(tokens, tmp_path):
    """llama-tiny through the trainer, document masking on (the loader's position ids), 10 steps; the file is
    rewritten with TOKENMILL_UPDATE_GOLDEN=1."""
    summary = Trainer(parse_train_config(llama_config(tokens, tmp_path / "run", steps=10, eval_every=0))).run()
    assert summary["steps"] == 10
    got = [losses(tmp_path / "run")[s] for s in range(1, 11)]
    if os.environ.get("TOKENMILL_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps({"config": "tests/train/test_llama.py llama_config(), steps 10", "losses": got},
                                     indent=1))
    want = json.loads(GOLDEN.read_text())["losses"]
    # The OPT golden test's tolerance: exact on one machine, and BLAS kernels differ by a few ulps across CPUs.
    assert np.allclose(got, want, rtol=0, atol=1e-4), list(zip(got, want))
    assert got[-1] < got[0] - 0.2  # and it learns


@pytest.mark.slow  # two torchrun ranks: about 11 s; FSDP2 gradients in `make test`: test_trainer.py's, on OPT
def test_fsdp_gradients_equal_a_single_process_reference(tokens, tmp_path):
    """Two FSDP2 ranks (gloo) through the trainer's forward and backward, with the loader's position ids and the
    document mask, against the plain module on the whole global batch."""
    path = write_config(tmp_path / "train.yaml", llama_config(tokens, tmp_path / "run", micro_batch_size=3))
    out = tmp_path / "grads.pt"
    done = torchrun(2, [str(HERE / "grad_check.py"), str(path), str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    got = torch.load(out, weights_only=True)
    cfg = load_train_config(path)
    # One process, one micro-batch: the whole global batch, with its position ids.
    whole = TokenLoader([str(tokens)], seq_len=32, global_batch_size=12, seed=cfg.seed, position_ids=True)
    batch = whole.micro_batch(int(got["batch"]), 0)
    assert (batch["position_ids"][:, 1:] == 0).any()  # the batch packs several documents: the mask matters
    model = build_model(cfg.resolved_model(padded_vocab(256)))
    model.init_weights(torch.Generator().manual_seed(cfg.seed))
    loss = model(batch["input_ids"], labels=batch["labels"], position_ids=batch["position_ids"])
    loss.backward()
    assert abs(loss.item() - float(got["loss"])) < 1e-5
    assert set(got["grads"]) == {n for n, _ in model.named_parameters()}
    for name, p in model.named_parameters():
        ref, g = p.grad, got["grads"][name]
        assert torch.linalg.norm(g - ref) <= 1e-5 * torch.linalg.norm(ref) + 1e-12, name


def _killed_and_resumed(tmp_path: Path, cfg: dict, kill_after: int, launch: list[str]) -> tuple[Path, Path]:
    """``cfg`` run whole, and again SIGKILLed after step ``kill_after`` then rerun to the end: both outputs."""
    def train(path: Path, kill: int | None = None) -> subprocess.CompletedProcess:
        extra = {KILL_AFTER_STEP_ENV: str(kill)} if kill else {}
        return subprocess.run([*launch, str(path)], capture_output=True, text=True, timeout=300, env=env(**extra))

    whole, out = tmp_path / "whole", tmp_path / "killed"
    done = train(write_config(tmp_path / "whole.yaml", {**cfg, "output": str(whole)}))
    assert done.returncode == 0, done.stderr[-3000:]
    path = write_config(tmp_path / "killed.yaml", {**cfg, "output": str(out)})
    killed = train(path, kill_after)
    assert killed.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), killed.stderr[-3000:]
    assert max(losses(out)) == kill_after
    resumed = train(path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["action"] for e in events] == ["resume"]
    return whole, out


def _rows(output: Path) -> list[tuple]:
    return [(r["step"], r.get("loss"), r.get("valid_loss"), r.get("grad_norm")) for r in metrics(output)]


@pytest.mark.slow  # three training processes: `make test-slow`
def test_killed_between_checkpoints_resumes_with_the_same_losses(tokens, tmp_path):
    """llama-tiny with one loader worker (the trainer's default), killed two steps past the step-10 checkpoint and
    validation: the resumed steps' losses, norms and validation losses are bit-identical. Llama has no dropout, so
    nothing random is drawn in the step; the loader's order and the position ids are what must resume."""
    cfg = llama_config(tokens, tmp_path / "unused", checkpoint_every=5, eval_every=10)
    cfg.pop("loader")
    whole, out = _killed_and_resumed(tmp_path, cfg, 12, [sys.executable, "-m", "tokenmill.cli", "train"])
    assert sorted(losses(out)) == list(range(1, 21)) and any(r[2] is not None for r in _rows(out))
    assert _rows(out) == _rows(whole)


@pytest.mark.slow  # three launches of two ranks
def test_two_ranks_killed_between_checkpoints_resume_with_the_same_losses(tokens, tmp_path):
    cfg = llama_config(tokens, tmp_path / "unused", steps=10, micro_batch_size=3, checkpoint_every=4, eval_every=0)
    cfg.pop("loader")
    nproc = [sys.executable, "-m", "tokenmill.cli", "train", "--nproc", "2"]
    whole, out = _killed_and_resumed(tmp_path, cfg, 6, nproc)
    assert json.loads((out / "checkpoints" / "step-000000010" / "meta.json").read_text())["world_size"] == 2
    assert sorted(losses(out)) == list(range(1, 11))
    assert _rows(out) == _rows(whole)
