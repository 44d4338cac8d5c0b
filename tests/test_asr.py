"""Speech recognition (task=asr): CTC decoding and error-rate arithmetic on hand-made
examples, the fsdd_strings split rule, the audiofolder layouts, and tiny runs of every model
through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from bench.data.audiofolder import audiofolder_rows
from bench.errors import BenchError
from bench.records.record import record_problem
from tasks.asr import ASRTask, draw_strings, fsdd_pools
from tasks.ctc_decoding import BLANK, UNKNOWN, BeamDecoder, Vocabulary, error_rates, greedy_ids
from tests.conftest import read_records, run_cli

WORDS = Vocabulary.from_transcripts("word", ["one two", "two three"])  # <blank> <unk> one three two


def emissions(path: list[int], vocab: int) -> torch.Tensor:
    """(1, T, V) log-probs that put almost all mass on ``path``'s token at each step."""
    x = torch.full((1, len(path), vocab), -8.0)
    x[0, torch.arange(len(path)), torch.tensor(path)] = 0.0
    return x.log_softmax(-1)


def test_vocabulary_maps_unknown_words_to_unk_and_back():
    assert WORDS.tokens == [BLANK, UNKNOWN, "one", "three", "two"]
    assert WORDS.encode("two eleven one") == [4, 1, 2]
    assert WORDS.decode([4, 1, 2]) == "two <unk> one"
    chars = Vocabulary.from_transcripts("char", ["ab a"])
    assert chars.tokens == [BLANK, UNKNOWN, "a", "b", "|"]
    assert chars.encode("ab a") == [2, 3, 4, 2, 4]  # every word ends with "|", the last one too
    assert chars.decode(chars.encode("ab a")) == "ab a"
    assert chars.encode("ac") == [2, 1, 4]


def test_greedy_ctc_merges_repeats_only_without_a_blank_between():
    # one one <blank> one two two <pad steps past the length>
    path = [2, 2, 0, 2, 4, 4, 3, 3]
    ids = greedy_ids(emissions(path, 5), torch.tensor([6]))
    assert ids == [[2, 2, 4]]
    assert WORDS.decode(ids[0]) == "one one two"
    assert greedy_ids(emissions([0, 0, 0], 5), torch.tensor([3])) == [[]]  # all blank: empty


def test_beam_search_writes_only_lexicon_words():
    beam = BeamDecoder(WORDS, ["one", "three", "two"], beam_size=4)
    assert beam(emissions([2, 0, 2, 4, 0], 5), torch.tensor([5])) == ["one one two"]
    # a word held over several frames is one word, not more words in between
    assert beam(emissions([2, 0, 4, 4, 4, 0, 2], 5), torch.tensor([7])) == ["one two one"]
    # char units: "|" ends each word; the lexicon knows "two" and "to" only
    chars = Vocabulary.from_transcripts("char", ["two to"])
    t, w, o, space = (chars.tokens.index(c) for c in "two|")
    decoder = BeamDecoder(chars, ["two", "to"], beam_size=8)
    for path in ([t, w, o, space, t, o, space], [t, t, w, o, o, space, space, t, o, o, 0, space]):
        assert decoder(emissions(path, len(chars)), torch.tensor([len(path)])) == ["two to"]
    # the best path spells "ot", no word: greedy writes it, the beam search cannot
    assert chars.decode(greedy_ids(emissions([o, t, space], len(chars)), torch.tensor([3]))[0]) == "ot"
    (text,) = decoder(emissions([o, t, space], len(chars)), torch.tensor([3]))
    assert set(text.split()) <= {"two", "to"}  # a lexicon word, or nothing


def test_error_rates_count_substitutions_deletions_insertions():
    rates = error_rates(["one two three", "four five"], ["one too three six", ""])
    # sentence 1: one substitution (two->too), one insertion (six); sentence 2: two deletions
    assert (rates["substitutions"], rates["deletions"], rates["insertions"], rates["hits"]) == (1, 2, 1, 2)
    assert rates["reference_words"] == 5
    assert rates["wer"] == pytest.approx(4 / 5)
    assert 0 < rates["cer"] < 1


def test_a_test_word_outside_the_vocabulary_is_an_error_not_dropped():
    # the model can only write training words: "eleven" is a substitution, never skipped
    rates = error_rates(["one eleven"], [WORDS.decode(WORDS.encode("one eleven"))])
    assert rates["substitutions"] == 1 and rates["wer"] == pytest.approx(0.5)


def fake_fsdd_meta(speakers=("amy", "bob"), recordings=50) -> dict[str, list]:
    meta = {"digit": [], "speaker": [], "index": []}
    for speaker in speakers:
        for digit in range(10):
            for index in range(recordings):
                meta["digit"].append(digit)
                meta["speaker"].append(speaker)
                meta["index"].append(index)
    return meta


def test_fsdd_strings_put_no_recording_in_two_splits():
    meta = fake_fsdd_meta()
    pools = fsdd_pools(meta, "official", None)
    used = {split: set() for split in pools}
    for n, split in enumerate(pools):
        for digits, chosen in draw_strings(pools[split], 300, 1, 7, [0, n]):
            assert [meta["digit"][i] for i in chosen] == digits
            assert len({meta["speaker"][i] for i in chosen}) == 1  # one speaker per utterance
            assert 1 <= len(digits) <= 7
            used[split].update(chosen)
    assert {meta["index"][i] for i in used["test"]} <= set(range(5))
    assert {meta["index"][i] for i in used["val"]} <= set(range(5, 10))
    assert min(meta["index"][i] for i in used["train"]) >= 10
    assert not used["test"] & (used["train"] | used["val"]) and not used["val"] & used["train"]

    by_speaker = fsdd_pools(meta, "speaker", "bob")
    assert set(by_speaker["test"]) == {"bob"} and set(by_speaker["train"]) == {"amy"}
    amy = by_speaker["val"]["amy"]
    assert all(5 <= meta["index"][i] < 10 for recordings in amy.values() for i in recordings)


def test_fsdd_strings_are_the_same_for_the_same_seed():
    pools = fsdd_pools(fake_fsdd_meta(), "official", None)
    assert draw_strings(pools["train"], 20, 1, 7, [3, 0]) == draw_strings(pools["train"], 20, 1, 7, [3, 0])
    assert draw_strings(pools["train"], 20, 1, 7, [3, 0]) != draw_strings(pools["train"], 20, 1, 7, [4, 0])


# ---------------------------------------------------------------- audiofolder
WORD_TONES = {"yes": 440.0, "no": 880.0, "maybe": 660.0}


def speak(words: str, rate: int, channels: int = 1) -> np.ndarray:
    """A stand-in for speech: one tone per word, with short pauses."""
    parts = []
    for word in words.split():
        t = np.arange(int(0.25 * rate)) / rate
        parts += [0.3 * np.sin(2 * np.pi * WORD_TONES[word] * t), np.zeros(int(0.08 * rate))]
    wave = np.concatenate(parts).astype(np.float32)
    return np.stack([wave] * channels, axis=1) if channels > 1 else wave


def write_audiofolder(root: Path, rows: list[tuple[str, str, str]], layout: str = "split_column",
                      rate: int = 16000) -> Path:
    """rows: (split, file name, transcription); a stereo FLAC at 16 kHz for every third file."""
    root.mkdir(parents=True, exist_ok=True)
    by_folder: dict[Path, list[str]] = {}
    for n, (split, name, text) in enumerate(rows):
        folder = root if layout == "split_column" else root / split
        folder.mkdir(exist_ok=True)
        if n % 3 == 2:
            name = name.replace(".wav", ".flac")
        soundfile.write(folder / name, speak(text, rate, channels=2 if n % 3 == 2 else 1), rate)
        line = f"{name},{text}" + (f",{split}" if layout == "split_column" else "")
        by_folder.setdefault(folder, []).append(line)
    header = "file_name,transcription" + (",split" if layout == "split_column" else "")
    for folder, lines in by_folder.items():
        (folder / "metadata.csv").write_text("\n".join([header, *lines]) + "\n")
    return root


def phrases(count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(list(WORD_TONES), size=rng.integers(1, 4))) for _ in range(count)]


def audiofolder_rows_for(splits: dict[str, int]) -> list[tuple[str, str, str]]:
    rows = []
    for split, count in splits.items():
        rows += [(split, f"{split}_{i}.wav", text) for i, text in enumerate(phrases(count, len(rows)))]
    return rows


def test_audiofolder_reads_both_layouts_and_carves_validation(tmp_path):
    column = write_audiofolder(tmp_path / "a", audiofolder_rows_for({"train": 6, "validation": 2, "test": 2}))
    splits = [r[0] for r in audiofolder_rows(column, 0.1, 0)]
    assert splits.count("train") == 6 and splits.count("val") == 2 and splits.count("test") == 2

    folders = write_audiofolder(tmp_path / "b", audiofolder_rows_for({"train": 10, "test": 2}), "folders")
    rows = audiofolder_rows(folders, 0.2, 0)
    assert [r[0] for r in rows].count("val") == 2 and [r[0] for r in rows].count("train") == 8
    assert rows == audiofolder_rows(folders, 0.2, 0)  # the carve is fixed by the seed
    assert all(r[1].is_file() for r in rows)


def test_audiofolder_features_are_resampled_and_mixed_down(tmp_path):
    root = write_audiofolder(tmp_path / "a", audiofolder_rows_for({"train": 6, "validation": 2, "test": 3}))
    task = ASRTask("asr", "audiofolder", None, str(tmp_path / "cache"), root=str(root))
    splits = task.load(0)
    assert splits.info["sizes"] == {"train": 6, "val": 2, "test": 3}
    x, lengths, targets, target_lengths, index = splits.test[[0, 1, 2]]
    assert x.shape[:3] == (3, 1, 40) and x.shape[-1] == int(lengths.max())
    # 16 kHz resampled to 8 kHz with a 10 ms hop: 100 frames per second of audio
    seconds = [len(t.split()) * 0.33 for t in splits.test.references]
    assert lengths.tolist() == [1 + round(s * 8000) // 80 for s in seconds]
    assert (target_lengths == torch.tensor([len(t.split()) for t in splits.test.references])).all()


# ---------------------------------------------------------------- runs
BUDGET = ["trainer.max_steps=4", "trainer.batch_size=8", "trainer.eval_batch_size=16",
          "trainer.infer_iters=2", "trainer.timing_warmup_steps=1", "model.depth=1"]
SYNTH = ["task=asr", "task.dataset=synth_strings", "task.sizes={train:40,val:8,test:8}", *BUDGET]


def check_asr_record(rec: dict, model: str, dataset: str, test_size: int) -> None:
    assert record_problem(rec) is None
    assert rec["status"] == "ok" and rec["task"] == "asr" and rec["dataset"] == dataset
    assert rec["metric_name"] == "wer" and rec["higher_is_better"] is False
    assert "(min)" in rec["checkpoint_selection"]
    details = rec["test_details"]
    assert rec["test_metric"] >= 0 and details["cer"] >= 0
    errors = details["substitutions"] + details["deletions"] + details["insertions"]
    assert rec["test_metric"] == pytest.approx(errors / details["reference_words"])
    assert "beam" in details["decoding"] and "wer_greedy" in details
    by_length = details["metric_by_length"]
    assert by_length["unit"] == "words" and by_length["metric"] == "wer"
    assert sum(b["count"] for b in by_length["buckets"]) == test_size
    assert {"reference", "hypothesis"} <= set(details["samples"][0])
    assert "CTC head" in rec["model_notes"]
    if model == "attention":
        example = torch.load(Path(rec["run_dir"]) / rec["attention_example"], weights_only=True)
        assert example["kind"] == "time" and example["heads"].shape[0] == rec["config"]["model"]["num_heads"]
        steps = example["heads"].shape[-1]
        torch.testing.assert_close(example["heads"].sum(-1), torch.ones(example["heads"].shape[:2]))
        assert steps == example["heads"].shape[1] and example["transcript"]
        distance = rec["attention_distance"]
        assert distance["unit"] == "frame"
        assert len(distance["per_layer_head"]) == rec["config"]["model"]["depth"]
    else:
        assert "bidirectional" in rec["model_notes"] and "attention_example" not in rec


@pytest.mark.slow
@pytest.mark.parametrize("model", ["attention", "lstm", "gru"])
def test_tiny_asr_run_on_synth_strings(tmp_path, model):
    out = run_cli("run", *SYNTH, f"model={model}", f"results_dir={tmp_path}", f"cache_dir={tmp_path / 'c'}")
    assert out.returncode == 0, out.stderr
    (rec,) = read_records(tmp_path)
    check_asr_record(rec, model, "synth_strings", 8)
    assert "no published baseline" in rec["data"]["dataset_note"]
    batching = rec["data"]["batching"]  # the asr recipe batches by length
    assert batching["mode"] == "bucketed"
    assert batching["padding_share"]["bucketed"] < batching["padding_share"]["random"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["attention", "lstm", "gru"])
def test_tiny_asr_run_on_an_audiofolder(tmp_path, model):
    root = write_audiofolder(tmp_path / "mine", audiofolder_rows_for({"train": 12, "test": 4}), "folders")
    out = run_cli("run", "task=asr", "task.dataset=audiofolder", f"task.root={root}", "task.units=char",
                  *BUDGET, f"model={model}", f"results_dir={tmp_path / 'r'}", f"cache_dir={tmp_path / 'c'}")
    assert out.returncode == 0, out.stderr
    (rec,) = read_records(tmp_path / "r")
    check_asr_record(rec, model, "audiofolder", 4)
    assert rec["data"]["units"] == "char" and rec["data"]["sizes"]["val"] >= 1
    assert json.dumps(rec["config"]["task"]["root"]) == json.dumps(str(root))


def test_fsdd_strings_from_the_data_root(data_dir, tmp_path):
    task = ASRTask("asr", "fsdd_strings", str(data_dir), str(tmp_path / "cache"),
                   sizes={"train": 30, "val": 6, "test": 6})
    splits = task.load(0)
    info = splits.info
    assert info["sizes"] == {"train": 30, "val": 6, "test": 6} and info["vocab_size"] == 12
    assert "no coarticulation" in info["dataset_note"] and "recordings 0-4" in info["split"]
    for low, high in info["words_per_utterance"].values():
        assert 1 <= low <= high <= 7
    # 1-7 digits of 0.2-0.8 s each plus 2-8 gaps of 50-300 ms: between 0.3 s and 8 s
    assert int(splits.train.lengths.min()) >= 30 and int(splits.train.lengths.max()) <= 800
    again = ASRTask("asr", "fsdd_strings", str(data_dir), str(tmp_path / "cache"),
                    sizes={"train": 30, "val": 6, "test": 6}).load(0)
    assert again.info["features"]["cached"] and again.test.references == splits.test.references


def test_a_metadata_csv_with_a_byte_order_mark_reads_as_without(tmp_path):
    root = write_audiofolder(tmp_path / "a", audiofolder_rows_for({"train": 6, "validation": 2, "test": 2}))
    plain = audiofolder_rows(root, 0.1, 0)
    csv_path = root / "metadata.csv"
    csv_path.write_bytes(b"\xef\xbb\xbf" + csv_path.read_bytes())  # as Excel saves "CSV UTF-8"
    assert audiofolder_rows(root, 0.1, 0) == plain


def test_the_char_word_separator_in_a_transcript_is_refused(tmp_path):
    rows = audiofolder_rows_for({"train": 6, "validation": 2, "test": 2})
    root = write_audiofolder(tmp_path / "a", rows)
    csv_path = root / "metadata.csv"
    csv_path.write_text(csv_path.read_text().replace(f",{rows[-1][2]},", ",a|b one,"))
    task = ASRTask("asr", "audiofolder", None, str(tmp_path / "cache"), root=str(root), units="char")
    with pytest.raises(BenchError, match="'a|b one' holds '|', the word separator of task.units=char"):
        task.load(0)
    word = ASRTask("asr", "audiofolder", None, str(tmp_path / "cache"), root=str(root), units="word")
    assert "a|b one" in word.load(0).test.references  # a word may hold it: no separator there


@pytest.mark.parametrize("family", ["attention", "rnn"])
def test_the_conv2d_front_end_reads_every_family_the_same_way(family):
    from models.ctc import RNNTranscriber, TransformerTranscriber
    from models.frontends import subsampled

    if family == "attention":
        model = TransformerTranscriber(40, 1, 300, 12, 8, 4, dim=32, depth=1, num_heads=2,
                                       frontend="conv2d", frontend_channels=8)
    else:
        model = RNNTranscriber(40, 1, 12, 4, hidden_dim=16, num_layers=1, cell="gru",
                               frontend="conv2d", frontend_channels=8)
    shapes = [tuple(p.shape) for p in model.frontend.parameters()]
    assert shapes == [(8, 1, 3, 3), (8,), (8, 8, 3, 3), (8,)]  # the same stack in both families
    lengths = torch.tensor([300, 101, 5])  # the last shorter than the 7 frames one step needs
    log_probs, steps = model(torch.randn(3, 1, 40, 300), lengths)
    assert steps.tolist() == [subsampled(300), subsampled(101), 1] == [74, 24, 1]
    assert log_probs.shape == (3, 74, 12)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(3, 74), atol=1e-5)
