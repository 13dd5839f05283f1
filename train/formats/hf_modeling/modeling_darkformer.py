# A darkformer causal language model for Hugging Face transformers, written by darkformer and
# copied next to the weights by `darkformer export-hf` for models whose attention is not
# softmax everywhere (Performer, LFK, DARKFormer, with or without an exact window, mixed per
# layer). Load the folder with
#     AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
# The body is the Llama or Gemma 3 architecture (config.family); each layer's attention is
# config.attention_layers[i]. The random features are the checkpoint's, saved in the folder
# (feature_map.omega: the matrices drawn for the checkpoint's redraw epoch; LFK's learned W;
# DARKFormer's M; a variance-optimal proposal's log-weights), so the outputs are deterministic
# and equal darkformer's own (`darkformer generate`, `eval`) to float32 rounding.
#
# What each random-feature layer computes (darkformer's docs/method.md), per query t:
#   x~ = d^(-1/4) x after RoPE (DARKFormer: d^(-1/4) M x), for queries and keys;
#   feature logits l(x~) = Omega x~ - |x~|^2 / 2 - ln(m) / 2 (+ log-weight), phi = exp(l);
#   far keys (all visible keys, or those at least exact_window back): weight phi(q~).phi(k~);
#   near keys (the exact_window nearest; every key in mode "exact"): weight exp(q~ . k~);
#   out_t = (sum_j w_tj v_j) / (sum_j w_tj + eps exp(qoff_t + o_t)), with qoff_t the query's
#   largest feature logit and o_t the largest logit of its far keys (eps is darkformer's guard,
#   added in those offset units; it vanishes when the query has no far key).
# That is evaluated here as a quadratic (T x T) form in float64, blocks of query rows at a
# time: exactness over speed, since feature logits of a pretrained model's keys span more
# than float32's exponent range. There is no key/value cache: generate() recomputes the
# prefix at every token (fine for checks and short texts; darkformer generate decodes in
# O(1) per token with the recurrent state).
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_darkformer import DarkformerConfig

QUERY_BLOCK = 256  # query rows per block of the quadratic form: memory O(B H QUERY_BLOCK T)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


def rope(x, positions, theta):
    # x (B, T, H, D); dimension i rotates with i + D/2 (rotate_half) by position * theta^(-2i/D).
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = positions.to(torch.float64)[..., None] * inv_freq  # (B, T, D/2)
    cos = torch.cat([angles.cos(), angles.cos()], -1)[:, :, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], -1)[:, :, None, :]
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return (x.double() * cos + rotated.double() * sin).to(x.dtype)


class FeatureMap(nn.Module):
    """A random-feature layer's own tensors: M (DARKFormer), W (LFK), omega and log_weight
    (the drawn features and a proposal's log-weights), under darkformer's names."""

    def __init__(self, spec, n_kv_heads, head_dim):
        super().__init__()
        self.kind, self.mode = spec["kind"], spec.get("mode", "linear")
        self.eps, self.exact_window = spec["eps"], spec.get("exact_window", 0)
        m, r = spec["num_features"], spec.get("rank") or head_dim
        self.head_dim = head_dim
        if self.kind == "darkformer":
            self.M = nn.Parameter(torch.zeros(spec.get("matrices", n_kv_heads), r, head_dim))
        if self.kind == "lfk":
            self.W = nn.Parameter(torch.zeros(n_kv_heads, m, head_dim))
        elif self.mode == "linear":
            self.register_buffer("omega", torch.zeros(n_kv_heads, m, r))
        if spec.get("log_weight"):
            self.register_buffer("log_weight", torch.zeros(n_kv_heads, m))
        else:
            self.log_weight = None

    def transformed(self, x, kv):
        # x (B, T, H, D) float64, kv (H,): each row's key/value head -> (B, T, H, r).
        scale = self.head_dim ** -0.25
        if self.kind != "darkformer":
            return x * scale
        m = self.M.double()
        m = m[kv] if m.shape[0] > 1 else m.expand(len(kv), -1, -1)
        return torch.einsum("bthd,hrd->bthr", x, m * scale)

    def logits(self, x, kv):
        # Transformed rows (B, T, H, r) -> feature logits (B, T, H, m).
        omega = (self.W if self.kind == "lfk" else self.omega).double()[kv]
        out = torch.einsum("bthr,hmr->bthm", x, omega)
        out = out - 0.5 * x.pow(2).sum(-1, keepdim=True) - 0.5 * math.log(omega.shape[1])
        if self.log_weight is not None:
            out = out + self.log_weight.double()[kv]
        return out


def kernel_attention(fm, q, k, v, visible, dist, kv):
    """Random-feature (or exact-kernel) attention in float64; q (B, T, H, D), k, v (B, T, Hkv, D)
    after RoPE, visible (B, T, T) the keys each query may see, dist (T, T) = t - j."""
    heads = torch.arange(k.shape[2], device=k.device)
    xq, xk = fm.transformed(q.double(), kv), fm.transformed(k.double(), heads)[:, :, kv]
    vh = v.double()[:, :, kv]  # (B, T, H, Dv)
    if fm.mode == "exact":
        near, far = visible, None
    elif fm.exact_window > 0:
        near, far = visible & (dist < fm.exact_window), visible & (dist >= fm.exact_window)
    else:
        near, far = None, visible
    if far is not None:
        lq, lk = fm.logits(xq, kv), fm.logits(xk, kv)
        qoff = lq.amax(-1).transpose(1, 2)  # (B, H, T)
        key_top = lk.amax(-1).transpose(1, 2)  # (B, H, T): each key's largest logit
        real = visible.any(1)[:, None, :]  # keys some query sees
        top = key_top.masked_fill(~real, -math.inf).amax(-1, keepdim=True)  # (B, H, 1)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        eq = torch.exp(lq - lq.amax(-1, keepdim=True))
        ek = torch.exp(lk - top.transpose(1, 2)[..., None]).masked_fill(~real.transpose(1, 2)[..., None], 0.0)
    outs = []
    for t0 in range(0, q.shape[1], QUERY_BLOCK):
        rows = slice(t0, t0 + QUERY_BLOCK)
        scale = torch.full(vh[:, rows].transpose(1, 2).shape[:-1], -math.inf, dtype=torch.float64, device=q.device)
        if near is not None:
            s = torch.einsum("bthr,bjhr->bhtj", xq[:, rows], xk).masked_fill(~near[:, None, rows], -math.inf)
            scale = torch.maximum(scale, s.amax(-1))
        if far is not None:
            mask = far[:, None, rows]
            a = torch.einsum("bthm,bjhm->bhtj", eq[:, rows], ek).masked_fill(~mask, 0.0)  # units exp(-(qoff + top))
            far_scale = qoff[:, :, rows] + top  # log of those units
            far_top = key_top[:, :, None, :].masked_fill(~mask, -math.inf).amax(-1)  # o_t
            scale = torch.maximum(scale, torch.where(mask.any(-1), far_scale, torch.full_like(far_scale, -math.inf)))
        scale = torch.where(torch.isfinite(scale), scale, torch.zeros_like(scale))
        num = torch.zeros_like(vh[:, rows].transpose(1, 2))  # (B, H, rows, Dv)
        den = torch.zeros_like(scale)
        if near is not None:
            p = torch.exp(s - scale[..., None])
            num, den = num + p @ vh.transpose(1, 2), den + p.sum(-1)
        if far is not None:
            a = a * torch.exp(far_scale - scale)[..., None]
            guard = fm.eps * torch.exp(qoff[:, :, rows] + far_top - scale)  # 0 where no far key
            num, den = num + a @ vh.transpose(1, 2), den + a.sum(-1) + guard
        out = torch.where(den[..., None] > 0, num / torch.where(den > 0, den, torch.ones_like(den))[..., None], 0.0)
        outs.append(out.transpose(1, 2))
    return torch.cat(outs, 1)


def softmax_attention(q, k, v, visible, kv):
    qf, kf, vf = q.float(), k.float()[:, :, kv], v.float()[:, :, kv]
    s = torch.einsum("bthd,bjhd->bhtj", qf, kf) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~visible[:, None], -math.inf)
    p = torch.softmax(s, -1).nan_to_num(0.0)  # a row without keys (left padding) outputs 0
    return (p @ vf.transpose(1, 2)).transpose(1, 2)


class DarkformerAttention(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        c = config
        self.n_heads, self.n_kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, c.hidden_size, bias=False)
        self.gemma = c.family == "gemma3"
        if self.gemma:
            self.q_norm = RMSNorm(self.head_dim, c.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, c.rms_norm_eps)
        local = c.layer_types[layer] == "sliding_attention"
        self.window = c.sliding_window if local else 0
        self.theta = c.rope_local_base_freq if local else c.rope_theta
        spec = c.attention_layers[layer]
        self.feature_map = FeatureMap(spec, self.n_kv_heads, self.head_dim) if spec["kind"] != "softmax" else None

    def forward(self, x, positions, key_real):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.n_kv_heads, self.head_dim)
        if self.gemma:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rope(q, positions, self.theta), rope(k, positions, self.theta)
        idx = torch.arange(t, device=x.device)
        dist = idx[:, None] - idx[None, :]
        visible = (dist >= 0)[None] & key_real[:, None, :]
        if self.window > 0:
            visible = visible & (dist < self.window)[None]
        kv = torch.arange(self.n_heads, device=x.device) // (self.n_heads // self.n_kv_heads)
        if self.feature_map is None:
            out = softmax_attention(q, k, v, visible, kv)
        else:
            out = kernel_attention(self.feature_map, q, k, v, visible, dist, kv)
        return self.o_proj(out.to(x.dtype).reshape(b, t, -1))


class DarkformerMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act = {"silu": F.silu, "gelu": F.gelu,
                    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}[config.hidden_act]

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DarkformerDecoderLayer(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        eps = config.rms_norm_eps
        self.gemma = config.family == "gemma3"
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.self_attn = DarkformerAttention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps)
        if self.gemma:  # norms on the attention and MLP outputs; the MLP's input norm is its own
            self.pre_feedforward_layernorm = RMSNorm(config.hidden_size, eps)
            self.post_feedforward_layernorm = RMSNorm(config.hidden_size, eps)
        self.mlp = DarkformerMLP(config)

    def forward(self, x, positions, key_real):
        a = self.self_attn(self.input_layernorm(x), positions, key_real)
        if self.gemma:
            x = x + self.post_attention_layernorm(a)
            return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x))


class DarkformerPreTrainedModel(PreTrainedModel):
    config_class = DarkformerConfig
    base_model_prefix = "model"
    _no_split_modules = ["DarkformerDecoderLayer"]

    def _init_weights(self, module):
        # Every tensor comes from the checkpoint; this only fills new models made from a config.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, 0.02)


class DarkformerModel(DarkformerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DarkformerDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        x = self.embed_tokens(input_ids)
        if self.config.family == "gemma3":
            x = x * torch.tensor(self.config.hidden_size ** 0.5, dtype=x.dtype)
        if attention_mask is None:
            key_real = torch.ones(input_ids.shape, dtype=torch.bool, device=input_ids.device)
        else:
            key_real = attention_mask.bool()
        if position_ids is None:  # left padding: positions count the real tokens only
            position_ids = (key_real.long().cumsum(-1) - 1).clamp(min=0)
        for layer in self.layers:
            x = layer(x, position_ids, key_real)
        return self.norm(x)


class DarkformerForCausalLM(DarkformerPreTrainedModel, GenerationMixin):
    def __init__(self, config):
        super().__init__(config)
        self.model = DarkformerModel(config)
        # Tied embeddings: the head is the embedding matrix itself (no second tensor to tie).
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size,
                                                                          bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, labels=None, **kwargs):
        x = self.model(input_ids, attention_mask, position_ids)
        head = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = x @ head.t()
        loss = None
        if labels is not None:  # transformers' convention: labels are the inputs, shifted here
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}  # no cache: the whole prefix
