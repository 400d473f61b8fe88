"""The OPT-style decoder: shapes, init, causality, attention against a naive reference, optimiser groups, sizes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.train.model import PRESETS, ModelConfig, OPTDecoder, model_config

V, S = 97, 32


def tiny(**overrides) -> OPTDecoder:
    model = OPTDecoder(model_config("opt-tiny", vocab_size=V, max_seq_len=S, **overrides))
    model.init_weights(torch.Generator().manual_seed(0))
    return model


def tokens(b: int, t: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(seed))


def test_shapes():
    model = tiny().eval()
    x = tokens(3, 20)
    assert model(x).shape == (3, 20, V)
    loss = model(x, labels=x)
    assert loss.shape == () and loss.dtype == torch.float32
    assert isinstance(model.blocks, nn.ModuleList) and len(model.blocks) == PRESETS["opt-tiny"]["n_layers"]


def test_sequence_longer_than_max_seq_len_is_refused():
    with pytest.raises(ValueError, match="max_seq_len"):
        tiny()(tokens(1, S + 1))


def test_head_is_the_token_embedding():
    model = tiny().eval()
    assert model.output_weight is model.tok_emb.weight
    # No second (V, C) parameter anywhere, and the state dict holds the matrix once.
    assert [n for n, p in model.named_parameters() if p.shape[0] == V] == ["tok_emb.weight"]
    assert model.num_params() == sum(p.numel() for p in model.parameters())
    # A token absent from the input can only get a gradient through the head.
    x = tokens(2, 16) % (V - 1)  # token V-1 never appears
    model(x, labels=x).backward()
    assert model.tok_emb.weight.grad[V - 1].abs().sum() > 0


def test_init():
    cfg = model_config({"n_layers": 4, "d_model": 256, "n_heads": 4}, vocab_size=1000, max_seq_len=256)
    model = OPTDecoder(cfg)
    model.init_weights(torch.Generator().manual_seed(1))
    resid = 0.006 / math.sqrt(2 * 4)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            assert torch.count_nonzero(m.bias) == 0
        if isinstance(m, nn.LayerNorm):
            assert torch.all(m.weight == 1) and torch.count_nonzero(m.bias) == 0
    for block in model.blocks:
        assert block.attn.qkv.weight.std().item() == pytest.approx(0.006, rel=0.03)
        assert block.mlp.fc1.weight.std().item() == pytest.approx(0.006, rel=0.03)
        assert block.attn.out_proj.weight.std().item() == pytest.approx(resid, rel=0.03)
        assert block.mlp.fc2.weight.std().item() == pytest.approx(resid, rel=0.03)
        assert block.attn.qkv.weight.mean().abs().item() < 1e-4
    assert model.tok_emb.weight.std().item() == pytest.approx(0.006, rel=0.03)
    assert model.pos_emb.weight.std().item() == pytest.approx(0.006, rel=0.03)


def test_init_is_reproducible_from_a_generator():
    a, b, c = tiny(), tiny(), OPTDecoder(model_config("opt-tiny", vocab_size=V, max_seq_len=S))
    c.init_weights(torch.Generator().manual_seed(1))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["blocks.0.attn.qkv.weight"], sc["blocks.0.attn.qkv.weight"])


def test_meta_then_to_empty_then_init():
    """The FSDP2 path: build on meta, materialise, initialise; the head stays tied."""
    cfg = model_config("opt-tiny", vocab_size=V, max_seq_len=S)
    with torch.device("meta"):
        model = OPTDecoder(cfg)
    assert all(p.is_meta for p in model.parameters())
    model.to_empty(device="cpu")
    model.init_weights(torch.Generator().manual_seed(0))
    assert model.output_weight is model.tok_emb.weight
    ref = tiny()
    assert all(torch.equal(v, ref.state_dict()[k]) for k, v in model.state_dict().items())


def test_causality():
    model = tiny().eval()
    x = tokens(2, 24)
    t = 10
    y = x.clone()
    y[:, t] = (y[:, t] + 1) % V
    with torch.no_grad():
        lx, ly = model(x), model(y)
    assert torch.equal(lx[:, :t], ly[:, :t])
    assert not torch.allclose(lx[:, t], ly[:, t])
    assert not torch.allclose(lx[:, t + 1 :], ly[:, t + 1 :])


def naive_attention(attn, x: torch.Tensor) -> torch.Tensor:
    B, T, C = x.shape
    nh, hs = attn.n_heads, attn.head_dim
    q, k, v = (x @ attn.qkv.weight.T + attn.qkv.bias).split(C, dim=2)
    q, k, v = (z.view(B, T, nh, hs).transpose(1, 2) for z in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
    return y @ attn.out_proj.weight.T + attn.out_proj.bias


def test_attention_matches_naive_reference():
    model = tiny().eval()
    attn = model.blocks[0].attn
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        # Large weights, so the softmax is far from uniform and a wrong scale would show.
        for p in attn.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        x = torch.randn(2, 16, 64, generator=g)
        got, want = attn(x), naive_attention(attn, x)
    assert want.abs().max() > 0.5
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_dropout_only_in_training():
    model = tiny()
    x = tokens(2, 16)
    with torch.no_grad():
        model.train()
        assert not torch.equal(model(x), model(x))
        model.eval()
        assert torch.equal(model(x), model(x))


def test_position_ids():
    model = tiny().eval()
    x = tokens(2, 16)
    with torch.no_grad():
        default = model(x)
        explicit = model(x, position_ids=torch.arange(16).expand(2, 16))
        # Restart positions at a document boundary at index 8.
        reset = torch.cat([torch.arange(8), torch.arange(8)]).expand(2, 16)
        restarted = model(x, position_ids=reset)
    assert torch.equal(default, explicit)
    assert torch.equal(default[:, :8], restarted[:, :8])
    assert not torch.allclose(default[:, 8:], restarted[:, 8:])


def test_loss_is_cross_entropy_of_logits():
    model = tiny().eval()
    x, labels = tokens(2, 16), tokens(2, 16, seed=1)
    labels[0, :3] = -100
    with torch.no_grad():
        logits = model(x)
        loss = model(x, labels=labels)
    want = F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)
    torch.testing.assert_close(loss, want)
    assert loss.item() == pytest.approx(math.log(V), rel=0.05)  # small init: near uniform


def test_param_groups():
    model = tiny()
    decay, no_decay = model.param_groups(0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    ids = [id(p) for p in decay["params"]] + [id(p) for p in no_decay["params"]]
    assert len(ids) == len(set(ids))
    assert set(ids) == {id(p) for p in model.parameters()}
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = sorted(names[id(p)] for p in decay["params"])
    assert len(decayed) == 4 * len(model.blocks)
    assert all(n.endswith(".weight") and ("ln" not in n) and ("emb" not in n) for n in decayed)
    assert all(p.dim() == 2 for p in decay["params"])
    for n in ("tok_emb.weight", "pos_emb.weight", "ln_f.weight", "ln_f.bias", "blocks.0.attn.qkv.bias"):
        assert id(dict(model.named_parameters())[n]) in {id(p) for p in no_decay["params"]}
    torch.optim.AdamW(model.param_groups(0.1), lr=1e-3)  # accepted as is


@pytest.mark.parametrize(
    "preset, expected",
    [("opt-125m", 125e6), ("opt-350m", 350e6), ("opt-1.3b", 1.3e9), ("opt-2.7b", 2.7e9), ("opt-6.7b", 6.7e9)],
)
def test_preset_sizes_match_opt(preset, expected):
    with torch.device("meta"):
        model = OPTDecoder(model_config(preset, vocab_size=50272, max_seq_len=2048))
    assert all(p.is_meta for p in model.parameters())
    assert model.num_params() == pytest.approx(expected, rel=0.05)


def test_num_params_and_flops():
    model = tiny()
    cfg = model.cfg
    emb = (V + S) * cfg.d_model
    assert model.num_params(exclude_embeddings=True) == model.num_params() - emb
    per_block = 4 * cfg.d_model**2 + 4 * cfg.d_model + 2 * cfg.d_model * cfg.ffn_dim + cfg.ffn_dim + cfg.d_model
    per_block += 4 * cfg.d_model  # two LayerNorms
    assert model.num_params(exclude_embeddings=True) == cfg.n_layers * per_block + 2 * cfg.d_model
    n = model.num_params() - S * cfg.d_model
    assert model.flops_per_token(32) == 6 * n + 12 * cfg.n_layers * cfg.d_model * 32


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="d_model.*n_heads"):
        model_config({"n_layers": 2, "d_model": 60, "n_heads": 7}, vocab_size=V, max_seq_len=S)
    with pytest.raises(ValueError, match="opt-125m"):
        model_config("opt-125", vocab_size=V, max_seq_len=S)
    with pytest.raises(ValueError, match="dropout"):
        model_config("opt-tiny", vocab_size=V, max_seq_len=S, dropout=1.5)
    with pytest.raises(ValueError, match="vocab_size"):
        model_config("opt-tiny", vocab_size=0, max_seq_len=S)
    with pytest.raises(ValueError, match="init_std"):
        model_config("opt-tiny", vocab_size=V, max_seq_len=S, init_std=0.0)
    with pytest.raises(ValueError, match="n_layer"):
        model_config({"n_layer": 2, "d_model": 64, "n_heads": 4}, vocab_size=V, max_seq_len=S)
    with pytest.raises(TypeError):
        ModelConfig(V, 2, 64, 4, S)  # keyword-only


def test_config_defaults_and_overrides():
    cfg = model_config("opt-125m", vocab_size=50272, max_seq_len=2048, dropout=0.0)
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim) == (12, 768, 12, 3072)
    assert cfg.dropout == 0.0 and cfg.init_std == 0.006 and cfg.head_dim == 64
    assert ModelConfig(vocab_size=V, n_layers=1, d_model=32, n_heads=2, max_seq_len=S).ffn_dim == 128
    assert ModelConfig(vocab_size=V, n_layers=1, d_model=32, n_heads=2, max_seq_len=S).dropout == 0.1
    with pytest.raises(AttributeError):
        cfg.d_model = 1  # frozen


def test_adamw_fits_a_repeated_sequence():
    model = tiny(dropout=0.0)
    seq = tokens(1, 8).repeat(1, 4).expand(4, 32)  # the same 8 tokens, four times
    x, y = seq[:, :-1], seq[:, 1:]
    opt = torch.optim.AdamW(model.param_groups(0.01), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = model(x, labels=y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0]
