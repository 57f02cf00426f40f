"""ALiBi beyond GPT-2/BERT: RoBERTa, DistilBERT, XLM-RoBERTa; models it refuses (rotary and
relative positions); the eager attention's dtype; the ``save_pretrained``/``from_pretrained``
round trip."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import functional as fn
from functional.alibi import AlibiBias, DisabledPositionEmbedding

transformers = pytest.importorskip("transformers")

VOCAB = 40


def gpt2(impl: str = "sdpa", dtype: torch.dtype = torch.float32):
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).to(dtype)
    model.set_attn_implementation(impl)
    return model.eval()


# ------------------------------------------------------------------ the eager attention's dtype


class _RecordAttentionMatrices(TorchDispatchMode):
    """Records the dtype of every op output shaped like an attention matrix (B, H, L, L)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape
        self.dtypes: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and tuple(t.shape) == self.shape:
                self.dtypes.append(t.dtype)
        return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_eager_attention_keeps_the_low_precision_attention_matrix(dtype):
    """Issue 27 item 4: no float32 (B, H, L, L) copy in a bf16/fp16 model, as in HF's eager."""
    model = fn.apply_alibi(gpt2("eager", dtype), 64)
    ids = torch.randint(0, VOCAB, (2, 12))
    record = _RecordAttentionMatrices((2, 4, 12, 12))
    with torch.no_grad(), record:
        model(ids)
    assert record.dtypes, "no attention matrix seen"
    assert set(record.dtypes) == {dtype}, record.dtypes


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_eager_attention_is_bit_exact_with_transformers_eager_given_the_bias(family):
    """The ALiBi eager function is HF's eager attention with the bias merged into the mask."""
    from functional.alibi.huggingface import _alibi_eager_attention, _hf_mask

    module = __import__(f"transformers.models.{family}.modeling_{family}", fromlist=["x"])
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 8, generator=gen).to(torch.bfloat16) for _ in range(3))
    holder = torch.nn.Module()
    holder.alibi_bias = AlibiBias(4, 64)
    padding = torch.zeros(2, 1, 9, 9, dtype=torch.bfloat16)
    padding[0, ..., :3] = torch.finfo(torch.bfloat16).min
    ours, ours_weights = _alibi_eager_attention(holder, q, k, v, padding, scaling=0.3)
    mask = _hf_mask(holder, holder.alibi_bias, q, k, padding, False)
    ref, ref_weights = module.eager_attention_forward(holder, q, k, v, mask, scaling=0.3)
    assert ours.dtype == ref.dtype == torch.bfloat16
    assert torch.equal(ours, ref) and torch.equal(ours_weights, ref_weights)


# ------------------------------------------------------------- save_pretrained / from_pretrained


def test_from_pretrained_gives_a_plain_model_and_reapplying_restores_alibi(tmp_path):
    """Issue 24: the saved config does not carry ALiBi. Loading gives plain GPT-2 (using the
    saved, unused position table); re-applying ALiBi after loading gives the saved model back."""
    model = fn.apply_alibi(gpt2(), 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, VOCAB, (2, 20))
    model.train()
    model(ids, labels=ids).loss.backward()
    opt.step()
    model.eval()
    model.save_pretrained(tmp_path)

    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert not any(isinstance(m, AlibiBias) for m in loaded.modules())  # plain GPT-2
    assert type(loaded.transformer.wpe) is torch.nn.Embedding
    assert loaded.config._attn_implementation in ("sdpa", "eager")
    with torch.no_grad():
        expected = model(ids).logits
        assert not torch.allclose(loaded(ids).logits, expected)  # silently another model
        fn.apply_alibi(loaded, 64)
        assert isinstance(loaded.transformer.wpe, DisabledPositionEmbedding)
        torch.testing.assert_close(loaded(ids).logits, expected, rtol=0, atol=0)
        # and past the old position table, as before saving
        long_ids = torch.randint(0, VOCAB, (1, 50))
        torch.testing.assert_close(loaded(long_ids).logits, model(long_ids).logits, rtol=0, atol=0)
    assert list(loaded.state_dict()) == list(model.state_dict())
