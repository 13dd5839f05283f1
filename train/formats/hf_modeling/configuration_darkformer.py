# The configuration of a darkformer model exported by `darkformer export-hf` (written by
# darkformer, not part of transformers): the Llama or Gemma 3 body the model was trained with
# and, per layer, the attention it runs (softmax, performer, lfk or darkformer, with their
# settings). modeling_darkformer.py reads it; AutoConfig finds it through config.json's
# "auto_map" with trust_remote_code=True.
try:
    from transformers import PreTrainedConfig as _BaseConfig  # transformers >= 5
except ImportError:
    from transformers import PretrainedConfig as _BaseConfig


class DarkformerConfig(_BaseConfig):
    model_type = "darkformer"

    def __init__(self, family="llama", vocab_size=32000, hidden_size=512, intermediate_size=1024,
                 num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8, head_dim=64,
                 hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0,
                 rope_local_base_freq=10000.0, sliding_window=0, layer_types=None, attention_layers=None,
                 tie_word_embeddings=True, **kwargs):
        # family: "llama" (pre-norm blocks) or "gemma3" (embeddings scaled by sqrt(hidden_size),
        # QK-norm, norms on the attention and MLP outputs, sliding-window layers with their own
        # RoPE base). Norm weights are the multipliers themselves in both (no Gemma "1 + w").
        self.family = family
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.hidden_act = hidden_act  # silu (SwiGLU), gelu (GeGLU), gelu_pytorch_tanh (GeGLU, tanh GELU)
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.rope_local_base_freq = rope_local_base_freq
        self.sliding_window = sliding_window
        # Per layer: "sliding_attention" (window sliding_window, base rope_local_base_freq) or
        # "full_attention".
        self.layer_types = layer_types or ["full_attention"] * num_hidden_layers
        # Per layer: {"kind": "softmax"} or a random-feature kind with its settings:
        # {"kind", "mode" ("linear" or "exact"), "num_features", "rank", "eps", "exact_window",
        # "feature_epoch", "log_weight" (whether the features carry a proposal's log-weights)}.
        self.attention_layers = attention_layers or [{"kind": "softmax"}] * num_hidden_layers
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
