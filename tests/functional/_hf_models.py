"""Small Hugging Face transformers models built from code (random init, nothing downloaded),
shared by the ALiBi / GLU family tests and the model-zoo test."""

from __future__ import annotations

import torch
from torch import nn

VOCAB = 40
MAX_POSITIONS = 32

# family -> (config class, masked-LM class, config keywords); small, dropout off.
_BERT_LIKE = {
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 24,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}
_DECODER = {
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": MAX_POSITIONS,
}
_SPECS = {
    "gpt2": (
        "GPT2Config",
        "GPT2LMHeadModel",
        {"n_positions": MAX_POSITIONS, "n_embd": 16, "n_layer": 2, "n_head": 4,
         "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
         "bos_token_id": 0, "eos_token_id": 0},
    ),
    "bert": ("BertConfig", "BertForMaskedLM", {**_BERT_LIKE, "max_position_embeddings": MAX_POSITIONS}),
    "roberta": (
        "RobertaConfig",
        "RobertaForMaskedLM",
        {**_BERT_LIKE, "max_position_embeddings": MAX_POSITIONS + 2, "pad_token_id": 1},
    ),
    "xlm_roberta": (
        "XLMRobertaConfig",
        "XLMRobertaForMaskedLM",
        {**_BERT_LIKE, "max_position_embeddings": MAX_POSITIONS + 2, "pad_token_id": 1},
    ),
    "distilbert": (
        "DistilBertConfig",
        "DistilBertForMaskedLM",
        {"dim": 16, "n_layers": 2, "n_heads": 4, "hidden_dim": 24, "dropout": 0.0,
         "attention_dropout": 0.0, "max_position_embeddings": MAX_POSITIONS},
    ),
    "llama": ("LlamaConfig", "LlamaForCausalLM", _DECODER),
    "mistral": ("MistralConfig", "MistralForCausalLM", _DECODER),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", _DECODER),
    "t5": (
        "T5Config",
        "T5ForConditionalGeneration",
        {"d_model": 16, "d_kv": 4, "d_ff": 24, "num_layers": 1, "num_heads": 4,
         "dropout_rate": 0.0, "decoder_start_token_id": 0},
    ),
}  # fmt: skip

ABSOLUTE = ("gpt2", "bert", "roberta", "xlm_roberta", "distilbert")
ROTARY_OR_RELATIVE = ("llama", "mistral", "qwen2", "t5")


def hf_model(family: str, impl: str = "sdpa", seed: int = 0) -> nn.Module:
    """A small ``family`` model in eval mode with the ``impl`` attention implementation."""
    import transformers

    config_name, model_name, kwargs = _SPECS[family]
    config = getattr(transformers, config_name)(vocab_size=VOCAB, **kwargs)
    torch.manual_seed(seed)  # transformers' init draws from the global generator
    model = getattr(transformers, model_name)(config)
    model.set_attn_implementation(impl)
    return model.eval()


def hf_inputs(family: str, length: int = 12, batch: int = 2, seed: int = 1) -> dict:
    """Keyword inputs for ``hf_model(family)``; token ids avoid the padding id 1."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (batch, length), generator=gen)
    inputs = {"input_ids": ids}
    if family == "t5":
        inputs["decoder_input_ids"] = ids[:, : max(1, length // 2)]
    return inputs


def hf_logits(model: nn.Module, inputs: dict) -> torch.Tensor:
    return model(**inputs).logits
