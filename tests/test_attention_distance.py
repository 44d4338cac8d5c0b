"""Mean attention distance per head: the arithmetic on maps built by hand, and every attention
model placing its tokens so that padding and cls tokens are left out."""

import math

import pytest
import torch
from torch import nn

from bench.run.attention_distance import distance_sums, mean_attention_distance, uniform_sum
from models.ctc import TransformerTranscriber
from models.patch import PatchTransformerClassifier
from models.seq2seq import TransformerSeq2Seq
from models.transformer import SelfAttentionMaps, TokenTransformerClassifier, sequence_coordinates


def test_distance_by_hand_cls_and_padding_left_out():
    """Four tokens: a cls token, three placed ones of which the last is padding. Head 0
    attends each token to itself (distance 0); head 1 spreads evenly over all four, so its
    weights over the two placed keys become 1/2 each after renormalising."""
    coordinates = torch.tensor([[[math.nan], [0.0], [1.0], [math.nan]]])  # (1, 4, 1)
    self_only = torch.eye(4)
    even = torch.full((4, 4), 0.25)
    maps = [torch.stack([self_only, even])[None]]  # one layer, (1, 2, 4, 4)
    sums, queries = distance_sums(SelfAttentionMaps(maps, coordinates, "token"))
    assert queries == 2  # the two placed tokens
    # head 1: token 0 looks at 0 and 1 (0.5 * 0 + 0.5 * 1), token 1 likewise: 0.5 + 0.5 = 1.
    torch.testing.assert_close(sums, torch.tensor([[0.0, 1.0]]))


def test_distance_on_a_grid_is_euclidean():
    """Two patches one row and one column apart: a head that attends only to the other is
    sqrt(2) patches away on average."""
    coordinates = torch.tensor([[[0.0, 0.0], [1.0, 1.0]]])
    other = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    sums, queries = distance_sums(SelfAttentionMaps([other[None, None]], coordinates, "patch"))
    assert queries == 2
    torch.testing.assert_close(sums / queries, torch.tensor([[math.sqrt(2)]]))
    # evenly over both keys: half of 0 and half of sqrt(2), for each query
    assert uniform_sum(coordinates) / queries == pytest.approx(math.sqrt(2) / 2)


def test_sequence_coordinates_mark_padding():
    place = sequence_coordinates(torch.tensor([3, 1]), 4, spacing=2.0)
    assert place.shape == (2, 4, 1)
    assert place[0, :3, 0].tolist() == [0.0, 2.0, 4.0] and place[0, 3].isnan().all()
    assert place[1, 0, 0] == 0 and place[1, 1:].isnan().all()


MODELS = {
    "vit": (lambda: PatchTransformerClassifier((8, 8), 4, 1, 3, dim=16, depth=2, num_heads=2),
            lambda: (torch.randn(3, 1, 8, 8),), 4 + 1, "patch"),
    "tokens": (lambda: TokenTransformerClassifier(10, 3, 6, 16, 2, 2, 2.0, 0.0, 0.0, "learned"),
               lambda: (torch.randint(0, 10, (3, 6)),), 6 + 1, "token"),
    "seq2seq": (lambda: TransformerSeq2Seq(20, dim=16, depth=2, num_heads=2, max_len=12),
                lambda: (torch.randint(1, 20, (3, 7)), torch.tensor([7, 4, 2]),
                         torch.randint(1, 20, (3, 5))), 7, "token"),
    "ctc": (lambda: TransformerTranscriber(8, 1, 40, 6, 4, 2, dim=16, depth=2, num_heads=2),
            lambda: (torch.randn(3, 1, 8, 40), torch.tensor([40, 20, 10])), None, "frame"),
}


@pytest.mark.parametrize("name", MODELS)
def test_models_place_their_tokens(name):
    build, inputs, tokens, unit = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    observed = model.self_attention_maps(*inputs())
    assert observed.unit == unit and len(observed.maps) == 2
    B, H, L, _ = observed.maps[0].shape
    assert (B, H) == (3, 2) and observed.coordinates.shape[:2] == (B, L)
    if tokens is not None:
        assert tokens == L
    placed = ~observed.coordinates.isnan().any(-1)
    if hasattr(model, "cls_token"):
        assert not placed[:, 0].any() and placed[:, 1:].all()
    if name in ("seq2seq", "ctc"):  # shorter examples have unplaced padding at the end
        assert placed[0].sum() > placed[1].sum() > placed[2].sum() > 0
    distance = mean_attention_distance(model, [inputs()])
    per_layer_head = torch.tensor(distance["per_layer_head"])
    assert per_layer_head.shape == (2, 2) and (per_layer_head > 0).all()
    assert distance["queries"] == int(placed.sum())
    even = [torch.full_like(m, 1.0) for m in observed.maps]  # renormalised over placed keys
    even_sums, _ = distance_sums(SelfAttentionMaps(even, observed.coordinates, unit))
    assert distance["uniform"] == pytest.approx(float(even_sums[0, 0]) / distance["queries"], rel=1e-5)


def test_models_without_self_attention_have_no_distance():
    assert mean_attention_distance(nn.LSTM(4, 4), [(torch.randn(2, 3, 4),)]) is None


def test_padding_does_not_move_the_distance():
    """A sequence measured alone and padded into a batch with a longer one gives the same
    per-head sums: padded keys get no weight and padded queries are not counted."""
    torch.manual_seed(0)
    model = TransformerSeq2Seq(20, dim=16, depth=1, num_heads=2, max_len=12).eval()
    short = torch.randint(1, 20, (1, 4))
    alone, _ = distance_sums(model.self_attention_maps(short, torch.tensor([4])))
    padded = torch.cat([short, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    batch = torch.cat([padded, torch.randint(1, 20, (1, 7))])
    both, _ = distance_sums(model.self_attention_maps(batch, torch.tensor([4, 7])))
    longer, _ = distance_sums(model.self_attention_maps(batch[1:], torch.tensor([7])))
    torch.testing.assert_close(both, alone + longer, rtol=1e-5, atol=1e-5)
