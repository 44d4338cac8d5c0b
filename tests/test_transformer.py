"""Encoder/decoder masking, position encodings and KV-cache decoding."""

import pytest
import torch

from models.transformer import (
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    TransformerDecoder,
    TransformerEncoder,
)

DIM, HEADS = 32, 4


def _encoder(pos="learned", **kw):
    torch.manual_seed(0)
    return TransformerEncoder(DIM, depth=2, num_heads=HEADS, pos_encoding=pos, max_len=16, **kw).eval()


@pytest.mark.parametrize("pos", ["sinusoidal", "learned", "rotary", "none"])
def test_padding_mask_hides_padded_tokens(pos):
    enc = _encoder(pos)
    x = torch.randn(2, 8, DIM)
    pad = torch.zeros(2, 8, dtype=torch.bool)
    pad[:, 5:] = True
    y1 = enc(x, key_padding_mask=pad)
    x2 = x.clone()
    x2[:, 5:] = torch.randn(2, 3, DIM) * 10  # change only the padded tokens
    y2 = enc(x2, key_padding_mask=pad)
    torch.testing.assert_close(y1[:, :5], y2[:, :5], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(y1[:, 5:], y2[:, 5:])


def test_causal_encoder_ignores_future():
    enc = _encoder("rotary")
    x = torch.randn(1, 8, DIM)
    y1 = enc(x, is_causal=True)
    x2 = x.clone()
    x2[:, 4:] = torch.randn(1, 4, DIM)
    y2 = enc(x2, is_causal=True)
    torch.testing.assert_close(y1[:, :4], y2[:, :4], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(y1[:, 4:], y2[:, 4:])


def test_without_position_encoding_attention_is_permutation_equivariant():
    enc = _encoder("none")
    x = torch.randn(1, 6, DIM)
    perm = torch.randperm(6)
    torch.testing.assert_close(enc(x)[:, perm], enc(x[:, perm]), atol=1e-5, rtol=1e-5)
    enc_pos = _encoder("sinusoidal")
    assert not torch.allclose(enc_pos(x)[:, perm], enc_pos(x[:, perm]), atol=1e-4)


def test_sinusoidal_table_matches_the_paper():
    pe = SinusoidalPositionalEncoding(8, 10)
    pos, i = 3, 2  # PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)
    angle = pos / 10000 ** (2 * i / 8)
    assert pe.table[pos, 2 * i].item() == pytest.approx(torch.tensor(angle).sin().item(), abs=1e-6)
    assert pe.table[pos, 2 * i + 1].item() == pytest.approx(torch.tensor(angle).cos().item(), abs=1e-6)


def test_rotary_scores_depend_only_on_relative_position():
    rope = RotaryEmbedding(8, 64)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    score = lambda i, j: (rope(q, i) * rope(k, j)).sum().item()
    assert score(5, 2) == pytest.approx(score(13, 10), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-4)


def _decoder(pos):
    torch.manual_seed(0)
    return TransformerDecoder(DIM, depth=2, num_heads=HEADS, pos_encoding=pos, max_len=16).eval()


@pytest.mark.parametrize("pos", ["sinusoidal", "learned", "rotary"])
def test_decoder_is_causal_and_reads_memory(pos):
    dec = _decoder(pos)
    tgt, mem = torch.randn(2, 6, DIM), torch.randn(2, 9, DIM)
    y1 = dec(tgt, mem)
    tgt2 = tgt.clone()
    tgt2[:, 3:] = torch.randn(2, 3, DIM)
    torch.testing.assert_close(dec(tgt2, mem)[:, :3], y1[:, :3], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(dec(tgt, torch.randn(2, 9, DIM)), y1)


def test_decoder_memory_padding_mask():
    dec = _decoder("learned")
    tgt, mem = torch.randn(2, 5, DIM), torch.randn(2, 9, DIM)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[:, 6:] = True
    mem2 = mem.clone()
    mem2[:, 6:] = 5.0
    torch.testing.assert_close(
        dec(tgt, mem, memory_key_padding_mask=pad), dec(tgt, mem2, memory_key_padding_mask=pad),
        atol=1e-5, rtol=1e-5,
    )


@pytest.mark.parametrize("pos", ["sinusoidal", "learned", "rotary"])
def test_decoder_kv_cache_equals_full_pass(pos):
    dec = _decoder(pos)
    tgt, mem = torch.randn(2, 7, DIM), torch.randn(2, 9, DIM)
    full = dec(tgt, mem)
    cache = dec.new_cache()
    steps = [dec(tgt[:, t : t + 1], mem, cache=cache) for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="divide"):
        TransformerEncoder(30, 2, 4)
    with pytest.raises(ValueError, match="pos_encoding"):
        TransformerEncoder(32, 2, 4, pos_encoding="alibi")
    with pytest.raises(ValueError, match="depth"):
        TransformerEncoder(32, 0, 4)
