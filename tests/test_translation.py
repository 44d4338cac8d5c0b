"""Translation: tokenizer cache, masks, KV-cache and beam decoding, BLEU, the corpora."""

import pytest
import sacrebleu
import torch

from bench.errors import BenchError
from models.decoding import beam_search, greedy_decode, greedy_decode_without_cache
from models.seq2seq import RNNSeq2Seq, TransformerSeq2Seq, padding_mask
from tasks.text_pairs import BOS, EOS, PAD, PairDataset, collate_pairs
from tasks.translation import TranslationTask, number_phrases

SMALL = {"train": 600, "val": 40, "test": 40}


def _numbers_task(cache, **kw):
    return TranslationTask("translation", "numbers", None, str(cache), vocab_size=200,
                           numbers_sizes=SMALL, **kw)


def test_number_phrases_are_deterministic_disjoint_and_varied():
    a, b = number_phrases("en", "de", SMALL, seed=1), number_phrases("en", "de", SMALL, seed=1)
    assert a == b
    assert number_phrases("en", "de", SMALL, seed=2) != a
    train, test = set(a["train"][0]), set(a["test"][0])
    assert not train & test
    lengths = [len(s.split()) for s in a["train"][0]]
    assert min(lengths) == 1 and max(lengths) >= 12  # from "seven" to long phrases


def test_tokenizer_is_trained_on_train_and_cached(tmp_path, monkeypatch):
    task = _numbers_task(tmp_path)
    splits = task.load(0)
    models = list((tmp_path / "tokenizers").glob("*.model"))
    assert len(models) == 1
    assert task.sp.DecodeIds(splits.train.src_ids[0]) == splits.train.src_text[0]  # lossless

    import sentencepiece

    def no_training(*args, **kwargs):
        raise AssertionError("tokenizer retrained")

    monkeypatch.setattr(sentencepiece.SentencePieceTrainer, "Train", no_training)
    again = _numbers_task(tmp_path)
    again.load(0)
    assert again.sp.GetPieceSize() == task.sp.GetPieceSize()
    # Other parameters are another cache entry (and would train).
    with pytest.raises(AssertionError, match="retrained"):
        TranslationTask("translation", "numbers", None, str(tmp_path), vocab_size=150,
                        numbers_sizes=SMALL).load(0)


def test_collate_pads_and_shifts_the_target():
    src, lengths, tgt_in, tgt_out, index = collate_pairs([([5, 6, 7], [8, 9], 0), ([5], [8, 9, 10], 1)])
    assert src.tolist() == [[5, 6, 7], [5, PAD, PAD]] and lengths.tolist() == [3, 1]
    assert tgt_in.tolist() == [[BOS, 8, 9, PAD], [BOS, 8, 9, 10]]
    assert tgt_out.tolist() == [[8, 9, EOS, PAD], [8, 9, 10, EOS]]
    assert padding_mask(lengths, 3).tolist() == [[False, False, False], [False, True, True]]
    assert index.tolist() == [0, 1]


def test_batches_come_from_pairs_padded_once_and_match_a_per_batch_collate(tmp_path):
    task = _numbers_task(tmp_path)
    train = task.load(0).train
    for indices in ([0, 1], [5, 2, 9], [7], list(range(40))):
        want = collate_pairs([(train.src_ids[i], train.tgt_ids[i], i) for i in indices])
        got = train[indices]
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), indices
    # The loader gives what a per-sample DataLoader with collate_pairs gave, batch for batch.
    per_sample = torch.utils.data.DataLoader(
        list(zip(train.src_ids, train.tgt_ids, range(len(train)), strict=True)), batch_size=32,
        shuffle=True, generator=torch.Generator().manual_seed(3), collate_fn=collate_pairs)
    batches = list(task.loader(train, 32, True, seed=3))
    assert len(batches) == len(per_sample)
    for got, want in zip(batches, per_sample, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert len(batches[-1][-1]) == len(train) % 32  # the last, short batch is kept
    assert len(PairDataset([], [], [], [])) == 0  # an empty split is left for check_not_empty


def _transformer():
    torch.manual_seed(0)
    return TransformerSeq2Seq(50, 32, 2, 4, 2.0, dropout=0.0, max_len=64).eval()


def _batch():
    torch.manual_seed(1)
    src = torch.randint(4, 50, (3, 7))
    lengths = torch.tensor([7, 5, 2])
    src[1, 5:] = PAD
    src[2, 2:] = PAD
    return src, lengths


def test_source_padding_does_not_change_the_translation():
    model = _transformer()
    src, lengths = _batch()
    tgt = torch.randint(4, 50, (3, 4))
    noisy = src.clone()
    noisy[2, 2:] = 9  # garbage where the mask says padding
    torch.testing.assert_close(model(src, lengths, tgt), model(noisy, lengths, tgt))


def test_decoder_is_causal():
    model = _transformer()
    src, lengths = _batch()
    tgt = torch.randint(4, 50, (3, 6))
    changed = tgt.clone()
    changed[:, 4:] = 11
    torch.testing.assert_close(model(src, lengths, tgt)[:, :4], model(src, lengths, changed)[:, :4])


def test_kv_cache_decoding_equals_full_decoding():
    model = _transformer()
    src, lengths = _batch()
    cached = greedy_decode(model, src, lengths, BOS, EOS, max_len=12)
    full = greedy_decode_without_cache(model, src, lengths, BOS, EOS, max_len=12)
    assert cached == full and all(len(row) > 0 for row in cached)


@pytest.mark.parametrize("kind", ["transformer", "gru+additive", "lstm"])
def test_beam_size_one_equals_greedy(kind):
    torch.manual_seed(0)
    model = {
        "transformer": _transformer,
        "gru+additive": lambda: RNNSeq2Seq(50, 24, 1, "gru", True, 0.0, additive_attention=True).eval(),
        "lstm": lambda: RNNSeq2Seq(50, 24, 2, "lstm", True, 0.0).eval(),
    }[kind]()
    src, lengths = _batch()
    greedy = greedy_decode(model, src, lengths, BOS, EOS, max_len=10)
    assert beam_search(model, src, lengths, BOS, EOS, beam_size=1, max_len=10) == greedy


def test_beam_search_finds_a_hypothesis_at_least_as_likely_as_greedy():
    model = _transformer()
    src, lengths = _batch()

    def log_prob(seqs):
        total = []
        for b, ids in enumerate(seqs):
            tgt = torch.tensor([[BOS, *ids]])
            out = torch.tensor([[*ids, EOS]])
            logp = model(src[b : b + 1], lengths[b : b + 1], tgt).log_softmax(-1)
            total.append(logp.gather(-1, out[..., None]).sum().item())
        return total

    greedy = greedy_decode(model, src, lengths, BOS, EOS, max_len=8)
    beam = beam_search(model, src, lengths, BOS, EOS, beam_size=5, alpha=0.0, max_len=8)
    finished = [len(g) < 8 for g in greedy]
    for g, b, done in zip(log_prob(greedy), log_prob(beam), finished, strict=True):
        if done:
            assert b >= g - 1e-4


def test_bleu_of_known_strings():
    refs = ["the cat sat on the mat", "a dog runs in the park"]
    assert sacrebleu.corpus_bleu(refs, [refs]).score == pytest.approx(100.0)
    assert sacrebleu.corpus_bleu(["completely different words here", "nothing"], [refs]).score < 5
    # sacreBLEU's documented example.
    hyps = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
    refs_a = ["The dog bit the man.", "It was not unexpected.", "The man bit him first."]
    refs_b = ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."]
    assert sacrebleu.corpus_bleu(hyps, [refs_a, refs_b]).score == pytest.approx(48.53, abs=0.01)


def test_bucketed_bleu_and_signature(tmp_path):
    task = _numbers_task(tmp_path)
    sentence = "one two three four five"
    by_length = task.by_length([[1] * 5, [1] * 30], [sentence, "x"], [[sentence], ["y z"]])
    assert by_length["unit"] == "source subword tokens" and by_length["metric"] == "bleu"
    buckets = by_length["buckets"]
    assert [(b["length"], b["count"]) for b in buckets] == [("1-12", 1), ("26+", 1)]  # 13-25: empty
    assert buckets[0]["value"] == pytest.approx(100.0) and buckets[1]["value"] < 1


def test_bad_language_settings(tmp_path):
    with pytest.raises(BenchError, match="both 'en'"):
        TranslationTask("translation", "numbers", None, str(tmp_path), src="en", tgt="en")
    with pytest.raises(BenchError, match="language 'xx' not offered"):
        TranslationTask("translation", "numbers", None, str(tmp_path), src="xx", tgt="en").load(0)


@pytest.mark.data
def test_multi30k_pairs_and_absent_pair(data_dir, tmp_path):
    task = TranslationTask("translation", "multi30k", str(data_dir), str(tmp_path), vocab_size=4000)
    splits = task.load(0)
    # one training source is also a validation source: the training copy goes
    assert splits.info["sizes"] == {"train": 28999, "val": 1014, "test": 1000}
    assert splits.info["overlap_removed"]["train"] == 1 and splits.info["overlap_removed"]["val"] == 0
    assert splits.info["pair"] == "de-en"
    with pytest.raises(BenchError, match="no de-fr pair .* available: de-en, en-de"):
        TranslationTask("translation", "multi30k", str(data_dir), str(tmp_path), tgt="fr").load(0)
