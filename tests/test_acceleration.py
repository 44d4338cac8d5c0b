"""bf16 autocast and torch.compile in the engine and in `mhab speed` (bench.run.acceleration)."""

import re
from dataclasses import replace

import pytest
import torch
from torch import nn
from torch._dynamo import register_backend

from bench.errors import BenchError
from bench.records.atomic import load_state_dict
from bench.run.acceleration import (
    autocast,
    check_compile,
    check_dtype,
    compile_backend,
    model_attention_path,
)
from bench.run.engine import CHECKPOINT, fit
from models.attention import MultiHeadAttention
from tests.test_engine import TRAINER, ToyTask

CPU = torch.device("cpu")
GRAPHS: list[torch.fx.GraphModule] = []


@register_backend
def mhab_test_counting(graph_module, example_inputs):
    """A torch.compile backend that records each graph dynamo captures and runs it eagerly."""
    GRAPHS.append(graph_module)
    return graph_module.forward


def _fit(run_dir, **trainer):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    forwards = []  # (training?, output dtype) of every forward the engine runs
    model.register_forward_hook(lambda m, args, out: forwards.append((m.training, out.dtype)))
    out = fit(ToyTask(), model, ToyTask().load(0), replace(TRAINER, **trainer), CPU, run_dir,
              seed=0, progress=False)
    return out, forwards, model


def test_bf16_autocasts_every_forward_and_keeps_float32_weights(tmp_path):
    out32, forwards32, _ = _fit(tmp_path / "fp32", dtype="float32")
    out16, forwards16, model = _fit(tmp_path / "bf16", dtype="bf16")
    assert {dtype for _, dtype in forwards32} == {torch.float32}
    assert {dtype for _, dtype in forwards16} == {torch.bfloat16}
    assert {training for training, _ in forwards16} == {True, False}  # training and evaluation
    assert model.weight.dtype == torch.float32
    assert load_state_dict(tmp_path / "bf16" / CHECKPOINT)["weight"].dtype == torch.float32
    assert out16["test_metric"] > 0.8
    # Rounding to bfloat16 changes the trajectory a little, not the outcome.
    losses32 = [h["train_loss"] for h in out32["history"]]
    losses16 = [h["train_loss"] for h in out16["history"]]
    assert losses16 != losses32 and losses16 == pytest.approx(losses32, rel=0.05)


def test_compile_runs_the_captured_graphs_and_trains_as_eager(tmp_path):
    GRAPHS.clear()
    eager, _, _ = _fit(tmp_path / "eager", compile=False)
    assert not GRAPHS
    compiled, _, model = _fit(tmp_path / "compiled", compile="mhab_test_counting")
    assert GRAPHS, "torch.compile captured no graph"
    assert [h["train_loss"] for h in compiled["history"]] == pytest.approx(
        [h["train_loss"] for h in eager["history"]], rel=1e-6)
    assert compiled["test_metric"] == eager["test_metric"]
    # Compiled in place: the checkpoint has the eager model's keys (no '_orig_mod.' prefix).
    assert set(load_state_dict(tmp_path / "compiled" / CHECKPOINT)) == {"weight", "bias"}


def test_compile_settings():
    assert compile_backend(False) is None and compile_backend(None) is None
    assert compile_backend(True) == "inductor"
    assert compile_backend("aot_eager") == "aot_eager"
    for bad in ("turbo", 1, "true "):
        with pytest.raises(BenchError, match="must be true, false or a torch.compile backend"):
            compile_backend(bad, "trainer.compile")


def test_inductor_on_cpu_needs_a_cxx_compiler(monkeypatch):
    monkeypatch.setattr("bench.run.acceleration.shutil.which", lambda name: None)
    with pytest.raises(BenchError, match="inductor needs a C.. compiler on CPU"):
        check_compile(True, CPU)
    check_compile("aot_eager", CPU)  # no C++ needed
    check_compile(False, CPU)


def test_dtype_settings():
    check_dtype("float32")
    check_dtype("bf16")
    for bad in ("fp16", "bfloat16", None):
        with pytest.raises(BenchError, match="must be float32 or bf16"):
            check_dtype(bad, "trainer.dtype")
    with autocast(CPU, "bf16"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast(CPU, "float32"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_speed_task_models_train_with_the_speed_options(tmp_path, monkeypatch):
    """`mhab speed dtypes=... compile=...` must time the bare loop and the engine alike: both
    read the run config's trainer, which takes the speed command's compile and, measurement by
    measurement, each of its dtypes."""
    from bench.setup.compose import compose_config
    from bench.setup.spec import build, prepare
    from bench.speed import benchmark

    cfg = compose_config("speed", ["compile=aot_eager", f"cache_dir={tmp_path}"], "speed")
    run_cfg = benchmark._run_config(cfg, "image", "gru")
    assert run_cfg.trainer.compile == "aot_eager"
    plain = compose_config("speed", [f"cache_dir={tmp_path}"], "speed")
    default = benchmark._run_config(plain, "image", "gru")
    assert default.trainer.dtype == "float32" and default.trainer.compile is False
    seen = []
    monkeypatch.setattr(benchmark, "measure_task_model",
                        lambda setup, dtype, cfg, device: seen.append(dtype) or [])
    assert prepare(run_cfg).trainer.compile == "aot_eager"  # the typed recipe the engine gets
    models = [build(prepare(default))]
    for dtype in ("float32", "bf16"):
        list(benchmark.task_rows(cfg, models, CPU, False, dtype))
    assert seen == ["float32", "bf16"]


def test_activation_memory_of_a_compiled_rnn_does_not_recompile_its_hook(caplog):
    """Dynamo graph-breaks around nn.LSTM, so the saved-tensor hook runs inside the compiled
    call; it must not be traced (once per storage size, up to the recompile limit)."""
    from bench.run import measure

    class Reader(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn, self.head = nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 2)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    eager = Reader()
    compiled = Reader()
    compiled.load_state_dict(eager.state_dict())
    compiled.compile(backend="mhab_test_counting")
    with caplog.at_level("WARNING", logger="torch._dynamo"):
        for length in range(4, 30, 2):  # 13 storage sizes, more than the recompile limit of 8
            x = torch.randn(3, length, 8)
            saved = [measure.activation_memory_mb(lambda m=m, x=x: m(x).sum()) for m in (compiled, eager)]
            assert saved[0] == pytest.approx(saved[1])
    assert "recompile_limit" not in caplog.text


def test_the_new_keys_at_their_defaults_keep_earlier_hashes_and_groups():
    """Runs recorded before trainer.dtype and trainer.compile existed trained as float32 and
    eager: their hash stays the same, so they still resume and group with new runs."""
    from bench.records.record import config_hash
    from bench.records.table import setting_labels

    before = {"model": {"dim": 8}, "trainer": {"lr": 1}}
    now = {"model": {"dim": 8}, "trainer": {"lr": 1, "dtype": "float32", "compile": False}}
    bf16 = {"model": {"dim": 8}, "trainer": {"lr": 1, "dtype": "bf16", "compile": False}}
    assert config_hash(before) == config_hash(now) != config_hash(bf16)
    assert config_hash({**now, "trainer": {**now["trainer"], "compile": "aot_eager"}}) != config_hash(now)
    labels = setting_labels({"old": before, "new-bf16": bf16})
    assert labels == {"old": 'trainer.dtype="float32"', "new-bf16": 'trainer.dtype="bf16"'}


def test_every_task_trains_in_bf16_and_records_its_precision_and_attention_path(tmp_path):
    from bench import api

    budget = ["trainer.dtype=bf16", "trainer.epochs=1", "trainer.max_steps=2", "trainer.infer_iters=1",
              "logger=none", f"results_dir={tmp_path}"]
    records = api.multirun(["suite=quick", "model=attention", *budget])
    records += api.multirun(["task=recall", "model=attention,gru", *budget])
    tasks = {r["task"] for r in records}
    assert tasks == {"image", "speech", "translation", "asr", "summarization", "recall"}
    for r in records:
        assert r["status"] == "ok" and r["config"]["trainer"]["dtype"] == "bf16", r.get("error")
        if r["model_family"] == "rnn":
            assert r["attention_path"] is None
        else:
            assert set(re.findall(r"sdpa|matmul", r["attention_path"])) <= {"sdpa", "matmul"}
    frame = api.table(tmp_path)
    assert set(frame["dtype"]) == {"bf16"} and frame["attention_path"].notna().sum() == len(records) - 1
    heads = [line for line in api.report(tmp_path).read_text().splitlines()
             if line.startswith("| model ") and "(mean ± 95% CI)" in line]
    assert heads and all("| dtype " in line for line in heads)  # a bf16 table says so


def test_a_float32_run_takes_the_reference_path(tmp_path):
    out, _, _ = _fit(tmp_path, dtype="float32")
    assert out["attention_path"] is None  # a model without the core
    core = nn.Sequential(MultiHeadAttention(8, 2))
    assert model_attention_path(core, CPU, "float32") == "sdpa"


def test_the_recorded_path_names_training_and_inference_where_they_differ(monkeypatch):
    chosen = {(4, True): "matmul", (4, False): "sdpa", (8, True): "matmul", (8, False): "matmul"}
    monkeypatch.setattr("bench.run.acceleration.attention_path",
                        lambda device, dtype, width, training: chosen[width, training])
    one = nn.Sequential(MultiHeadAttention(8, 2))
    assert model_attention_path(one, CPU, "bf16") == "matmul (train), sdpa (infer)"
    two = nn.Sequential(MultiHeadAttention(8, 2), MultiHeadAttention(16, 2))
    assert model_attention_path(two, CPU, "bf16") == (
        "matmul (train), sdpa (infer) at head width 4; matmul at head width 8")


def test_gru_under_cpu_autocast_runs_its_recurrence_in_float32():
    """torch has no bfloat16 CPU GRU kernel: under autocast the GRU computes exactly what it
    computes in float32, and is still an nn.GRU (weights, keys) everywhere else."""
    from models.rnn import RNN_CELLS

    torch.manual_seed(0)
    gru = RNN_CELLS["gru"](8, 16, num_layers=2, batch_first=True)
    plain = nn.GRU(8, 16, num_layers=2, batch_first=True)
    plain.load_state_dict(gru.state_dict())
    x, h0 = torch.randn(3, 5, 8).to(torch.bfloat16), torch.randn(2, 3, 16).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, hidden = gru(x, h0)
    expected, expected_hidden = plain(x.float(), h0.float())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    torch.testing.assert_close(hidden, expected_hidden, atol=0, rtol=0)
    torch.testing.assert_close(gru(x.float())[0], plain(x.float())[0], atol=0, rtol=0)


def test_log_probabilities_stay_float32_under_bf16_autocast():
    """CTC's loss and decoding and translation's beam scores read log-probabilities; under
    CPU autocast a log-softmax of bfloat16 logits would stay bfloat16."""
    from models.ctc import RNNTranscriber, TransformerTranscriber
    from models.seq2seq import RNNSeq2Seq, TransformerSeq2Seq

    x, lengths = torch.randn(2, 1, 8, 24), torch.tensor([24, 16])
    transcribers = [TransformerTranscriber(8, 1, 24, 6, patch_frames=4, stride=4, dim=16, depth=1,
                                           num_heads=2),
                    RNNTranscriber(8, 1, 6, stride=4, hidden_dim=8, num_layers=1, cell="gru")]
    src, src_lengths = torch.randint(1, 9, (2, 5)), torch.tensor([5, 3])
    translators = [TransformerSeq2Seq(9, 16, 1, 2), RNNSeq2Seq(9, 8, 1, cell="lstm")]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for model in transcribers:
            assert model.eval()(x, lengths)[0].dtype == torch.float32
        for model in translators:
            state = model.eval().encode(src, src_lengths)
            log_probs, _ = model.step(torch.ones(2, dtype=torch.long), state, model.start(state))
            assert log_probs.dtype == torch.float32
