"""``synth_digits`` and ``synth_strings``: spoken digits, alone or as strings, synthesised
offline with espeak-ng.

The ``espeakng-loader`` wheel bundles libespeak-ng and its data; we call its C API through
ctypes. espeak-ng carries state from one utterance to the next (and seeds its noise from it),
so a set is only reproducible when synthesised in the same order in a fresh process: each
call here runs ``python -m bench.data.speech_synth`` as a child process. Voices, variants, rates,
pitches and noise are drawn from a NumPy generator seeded by ``seed``; the same seed gives the
same clips.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

DIGIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
VOICES = ["en-us", "en-gb-x-rp", "en-029", "en-gb-scotland", "en-us-nyc", "en"]
VARIANTS = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "croak"]
# espeak_AUDIO_OUTPUT / espeak_PARAMETER / espeak_POSITION_TYPE values from speak_lib.h
AUDIO_OUTPUT_SYNCHRONOUS = 2
PARAM_RATE, PARAM_PITCH = 1, 3
POS_CHARACTER = 1


@dataclass(frozen=True)
class ClipSpec:
    digits: tuple[int, ...]  # spoken as one utterance: "three one four"
    voice: str
    rate: int  # words per minute
    pitch: int  # 0-100
    snr_db: float  # white noise added at this signal-to-noise ratio
    gain: float


def draw_specs(per_digit: int, seed: int) -> list[ClipSpec]:
    """The clip list for a seed: every digit ``per_digit`` times, with random voices."""
    rng = np.random.default_rng(seed)
    specs = []
    for digit in range(10):
        for _ in range(per_digit):
            voice = f"{rng.choice(VOICES)}+{rng.choice(VARIANTS)}"
            specs.append(ClipSpec(
                digits=(digit,), voice=voice, rate=int(rng.integers(110, 230)),
                pitch=int(rng.integers(15, 85)), snr_db=float(rng.uniform(10, 40)),
                gain=float(rng.uniform(0.3, 1.0)),
            ))
    return specs


def draw_string_specs(count: int, min_digits: int, max_digits: int, seed: int) -> list[ClipSpec]:
    """``count`` digit strings of ``min_digits`` to ``max_digits`` digits, each in one random
    voice, rate and pitch; the same seed gives the same list."""
    rng = np.random.default_rng(seed)
    specs = []
    for _ in range(count):
        length = int(rng.integers(min_digits, max_digits + 1))
        digits = tuple(int(d) for d in rng.integers(0, 10, size=length))
        specs.append(ClipSpec(
            digits=digits, voice=f"{rng.choice(VOICES)}+{rng.choice(VARIANTS)}",
            rate=int(rng.integers(130, 230)), pitch=int(rng.integers(15, 85)),
            snr_db=float(rng.uniform(15, 40)), gain=float(rng.uniform(0.3, 1.0)),
        ))
    return specs


def spoken_text(digits: list[int] | tuple[int, ...]) -> str:
    return " ".join(DIGIT_WORDS[d] for d in digits)


def _synthesise_in_this_process(specs: list[dict]) -> tuple[int, list[np.ndarray]]:
    import espeakng_loader

    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    rate = lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0,
                                 espeakng_loader.get_data_path().encode(), 0)
    if rate <= 0:
        raise RuntimeError("espeak-ng failed to initialise")
    chunks: list[np.ndarray] = []
    callback_type = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
    )

    @callback_type
    def collect(wav, num_samples, events):
        if num_samples > 0 and wav:
            chunks.append(np.ctypeslib.as_array(wav, shape=(num_samples,)).copy())
        return 0

    lib.espeak_SetSynthCallback(collect)
    lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
    lib.espeak_ng_SetRandSeed(0)
    clips = []
    for spec in specs:
        chunks.clear()
        if lib.espeak_SetVoiceByName(spec["voice"].encode()) != 0:
            raise RuntimeError(f"espeak-ng has no voice '{spec['voice']}'")
        lib.espeak_SetParameter(PARAM_RATE, spec["rate"], 0)
        lib.espeak_SetParameter(PARAM_PITCH, spec["pitch"], 0)
        text = spoken_text(spec["digits"]).encode()
        lib.espeak_Synth(text, len(text) + 1, 0, POS_CHARACTER, 0, 0, None, None)
        lib.espeak_Synchronize()
        clips.append(np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16))
    lib.espeak_Terminate()
    return rate, clips


def synthesise(specs: list[ClipSpec], seed: int) -> tuple[int, list[np.ndarray]]:
    """Float32 waveforms in [-1, 1] (noise and gain applied) and their sample rate."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "clips.npz"
        proc = subprocess.run(
            [sys.executable, "-m", "bench.data.speech_synth", str(out)],
            input=json.dumps([asdict(s) for s in specs]), capture_output=True, text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"espeak-ng synthesis failed: {last}")
        with np.load(out) as data:
            rate = int(data["rate"])
            raw = [data[f"clip{i}"] for i in range(len(specs))]
    rng = np.random.default_rng(seed + 1)
    clips = []
    for spec, samples in zip(specs, raw, strict=True):
        wave = samples.astype(np.float32) / 32768.0
        power = float(np.mean(wave**2)) if wave.size else 0.0
        noise_std = np.sqrt(power / 10 ** (spec.snr_db / 10)) if power > 0 else 0.0
        wave = wave + rng.normal(0.0, noise_std, size=wave.shape).astype(np.float32)
        peak = float(np.abs(wave).max()) if wave.size else 0.0
        clips.append(wave * (spec.gain / peak if peak > 0 else 1.0))
    return rate, clips


if __name__ == "__main__":  # the child process: specs as JSON on stdin, clips to an .npz
    rate, clips = _synthesise_in_this_process(json.load(sys.stdin))
    np.savez(sys.argv[1], rate=rate, **{f"clip{i}": c for i, c in enumerate(clips)})
