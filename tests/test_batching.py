"""Length-bucketed batches and the RNN encoder's padded-batch path."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bench.data.batching import BucketBatchSampler, TokenBatchSampler, padding_share
from bench.errors import BenchError
from models.rnn import RNNEncoder
from tasks.image import ImageTask
from tasks.text_pairs import PairDataset


def _lengths(n: int = 1000, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, 300, (n,), generator=torch.Generator().manual_seed(seed))


def _epoch(lengths, batch_size=64, seed=0, shuffle=True, pool_batches=4):
    generator = torch.Generator().manual_seed(seed)
    sampler = BucketBatchSampler(lengths, batch_size, shuffle, generator, pool_batches)
    return list(sampler), len(sampler)


def test_every_example_once_per_epoch_in_batches_of_the_batch_size():
    lengths = _lengths(1003)
    batches, count = _epoch(lengths)
    assert sorted(i for batch in batches for i in batch) == list(range(1003))
    assert count == len(batches) == 16
    assert sum(len(b) < 64 for b in batches) == 1  # only the last pool's remainder is short


def test_batches_are_deterministic_for_a_seed_and_differ_between_seeds():
    lengths = _lengths()
    assert _epoch(lengths, seed=3)[0] == _epoch(lengths, seed=3)[0]
    assert _epoch(lengths, seed=3)[0] != _epoch(lengths, seed=4)[0]


def test_bucketing_cuts_padding_and_keeps_the_batch_order_random():
    lengths = _lengths()
    bucketed, _ = _epoch(lengths)
    random = [b.tolist() for b in torch.randperm(1000, generator=torch.Generator().manual_seed(0)).split(64)]
    assert padding_share(bucketed, lengths) < 0.5 * padding_share(random, lengths)
    widths = [int(lengths[b].max()) for b in bucketed]
    assert widths != sorted(widths) and widths != sorted(widths, reverse=True)


def test_evaluation_batches_run_longest_first():
    lengths = _lengths(200)
    batches, _ = _epoch(lengths, batch_size=32, shuffle=False)
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(200))
    assert lengths[flat].tolist() == sorted(lengths.tolist(), reverse=True)


def test_padding_share_counts_padded_positions():
    lengths = torch.tensor([2, 4, 3, 3])
    assert padding_share([[0, 1], [2, 3]], lengths) == pytest.approx(1 - 12 / 14)


def test_a_bucketed_pair_loader_hands_out_every_pair_with_its_own_index():
    src = [[5] * n for n in (7, 1, 4, 9, 2, 2, 8)]
    dataset = PairDataset(src, [[6]] * 7, ["s"] * 7, ["t"] * 7)
    task = ImageTask.__new__(ImageTask)  # loader() is the base class's; no data needed
    task.name, task.dataset = "image", "digits"
    seen = {}
    for batch in task.loader(dataset, 3, shuffle=False, seed=0, batching="bucketed"):
        src_batch, src_lengths, *_, index = batch
        for row, i in enumerate(index.tolist()):
            seen[i] = int(src_lengths[row])
            assert src_batch[row, : src_lengths[row]].tolist() == src[i]
    assert seen == {i: len(s) for i, s in enumerate(src)}


def test_bucketed_batching_of_fixed_length_data_is_one_line_advice():
    task = ImageTask.__new__(ImageTask)
    task.name, task.dataset = "image", "digits"
    data = torch.utils.data.TensorDataset(torch.zeros(4, 2), torch.zeros(4))
    with pytest.raises(BenchError, match="use trainer.batching=random"):
        task.loader(data, 2, True, 0, batching="bucketed")


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_padded_rnn_path_matches_packed_sequences(cell, bidirectional):
    torch.manual_seed(0)
    encoder = RNNEncoder(6, 8, num_layers=2, cell=cell, bidirectional=bidirectional).eval()
    x, lengths = torch.randn(4, 9, 6), torch.tensor([9, 1, 5, 7])
    weigh_outputs, weigh_summary = torch.randn(4, 9, encoder.output_dim), torch.randn(4, encoder.output_dim)

    def outputs_and_grads(outputs, summary):
        encoder.zero_grad()
        ((outputs * weigh_outputs).sum() + (summary * weigh_summary).sum()).backward()
        return outputs, summary, {n: p.grad.clone() for n, p in encoder.named_parameters()}

    padded = outputs_and_grads(*encoder(x, lengths))
    packed, state = encoder.rnn(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    hidden = state[0] if cell == "lstm" else state
    expected = outputs_and_grads(pad_packed_sequence(packed, batch_first=True, total_length=9)[0],
                                 torch.cat(list(hidden[-encoder.directions:]), dim=-1))
    torch.testing.assert_close(padded, expected)  # outputs, summary and every weight's gradient
    assert padded[2]["rnn.weight_hh_l1"].abs().sum() > 0


def _token_epochs(lengths, max_tokens=600, seed=0, epochs=2):
    sampler = TokenBatchSampler(lengths, max_tokens, torch.Generator().manual_seed(seed))
    return [list(sampler) for _ in range(epochs)], len(sampler)


def test_token_batches_hold_every_example_once_and_stay_under_the_budget():
    lengths = _lengths(1003)
    (first, second), count = _token_epochs(lengths)
    for epoch in (first, second):
        assert sorted(i for batch in epoch for i in batch) == list(range(1003)) and len(epoch) == count
        assert all(len(b) * int(lengths[b].max()) <= 600 for b in epoch)
    assert first != second and sorted(first) == sorted(second)  # same batches, a new order
    sizes = {int(lengths[b].max()): len(b) for b in first}
    assert sizes[min(sizes)] > sizes[max(sizes)]  # short examples travel in bigger batches
    # Greedy: no batch could have taken the next example of the sorted order.
    assert padding_share(first, lengths) < 0.05


def test_token_batches_are_deterministic_for_a_seed():
    lengths = _lengths()
    assert _token_epochs(lengths, seed=5)[0] == _token_epochs(lengths, seed=5)[0]
    assert _token_epochs(lengths, seed=5)[0] != _token_epochs(lengths, seed=6)[0]


def test_token_budget_below_the_longest_example_is_refused():
    with pytest.raises(ValueError, match="does not fit under max_tokens=10"):
        TokenBatchSampler(torch.tensor([3, 11]), 10, torch.Generator())


def test_a_pair_loader_with_max_tokens_sizes_training_batches_by_positions():
    src = [[5] * n for n in (7, 1, 4, 9, 2, 2, 8, 3)]
    dataset = PairDataset(src, [[6]] * 8, ["s"] * 8, ["t"] * 8)
    task = ImageTask.__new__(ImageTask)
    task.name, task.dataset = "image", "digits"
    batches = list(task.loader(dataset, 2, shuffle=True, seed=0, batching="bucketed", max_tokens=9))
    assert sorted(i for b in batches for i in b[-1].tolist()) == list(range(8))
    assert all(b[0].shape[0] * b[0].shape[1] <= 9 for b in batches)
    assert max(b[0].shape[0] for b in batches) > 2  # not capped by batch_size
    info = task.batching_info(dataset, "bucketed", 2, 0, max_tokens=9)
    assert info["max_tokens"] == 9 and info["batches_per_epoch"] == len(batches)
    evaluation = list(task.loader(dataset, 2, shuffle=False, seed=0, batching="bucketed", max_tokens=9))
    assert all(b[0].shape[0] <= 2 for b in evaluation)  # evaluation keeps its batch size
