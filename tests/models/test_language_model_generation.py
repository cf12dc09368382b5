"""Sampling text from the language models: ``LanguageModel.generate`` and ``sample_next_token``."""

import pytest
import torch

from attnlab.models.language_model import LanguageModel, output_parts, sample_next_token

V, E, H, L = 23, 8, 12, 3
CONFIGS = [
    {"variant": "lstm"},
    {"variant": "attention", "window": L},
    {"variant": "key_value_predict", "window": L},
    {"variant": "ngram", "ngram": 3},
]
IDS = [c["variant"] for c in CONFIGS]


def _model(config) -> LanguageModel:
    torch.manual_seed(0)
    parts = output_parts(config["variant"], config.get("ngram", 4))
    return LanguageModel(V, embedding_dim=E, hidden_dim=H * parts, init_range=1.0, **config).eval()


def _prompt(batch=2, length=4):
    return torch.randint(1, V, (batch, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_greedy_generation_is_what_one_forward_pass_over_the_whole_text_predicts(config):
    """Step-by-step generation carries the state and memory exactly as a single segment does."""
    model, prompt = _model(config), _prompt()
    generation = model.generate(prompt, 6, temperature=0)
    text = torch.cat([prompt, generation.tokens], 1)
    resets = torch.zeros_like(text, dtype=torch.bool)
    resets[:, 0] = True
    whole = model(text[:, :-1], resets[:, :-1])
    steps = slice(prompt.size(1) - 1, None)
    assert torch.equal(whole.logits[:, steps].argmax(-1), generation.tokens)
    assert generation.tokens.shape == (2, 6)
    if whole.attention is None:
        assert generation.attention is None
    else:
        assert generation.attention.shape == (2, 6, L)
        torch.testing.assert_close(generation.attention, whole.attention[:, steps])


def test_sampling_is_reproducible_with_a_seed_and_differs_between_seeds():
    model, prompt = _model(CONFIGS[2]), _prompt()

    def sample(seed):
        return model.generate(prompt, 20, generator=torch.Generator().manual_seed(seed)).tokens

    assert torch.equal(sample(0), sample(0))
    assert not torch.equal(sample(0), sample(1))


def test_sampling_follows_the_temperature_and_top_k():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).repeat(4000, 1)
    generator = torch.Generator().manual_seed(0)
    counts = torch.bincount(sample_next_token(logits, generator=generator), minlength=4).float()
    torch.testing.assert_close(counts / 4000, torch.softmax(logits[0], 0), atol=0.03, rtol=0)
    hot = torch.bincount(sample_next_token(logits, 4.0, generator=generator), minlength=4).float()
    torch.testing.assert_close(hot / 4000, torch.softmax(logits[0] / 4, 0), atol=0.03, rtol=0)
    top2 = torch.bincount(sample_next_token(logits, top_k=2, generator=generator), minlength=4)
    assert top2[2:].sum() == 0 and top2[1] > 0
    assert sample_next_token(logits[:1], 0.0).item() == 0
    assert sample_next_token(logits[:1], 0.0, banned=(0,)).item() == 1
    assert sample_next_token(logits, banned=(0, 1), generator=generator).min() >= 2


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"steps": 0}, "steps must be >= 1"),
        ({"temperature": -1.0}, "temperature must be a finite number >= 0"),
        ({"temperature": float("inf")}, "temperature must be a finite number >= 0"),
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0"),
        ({"top_k": 0}, "top_k must be >= 1"),
        ({"prompt": torch.zeros(2, 0, dtype=torch.long)}, "prompt must be"),
    ],
)
def test_bad_sampling_options(arguments, message):
    options = {"prompt": _prompt(), "steps": 3, **arguments}
    with pytest.raises(ValueError, match=message):
        _model(CONFIGS[0]).generate(options.pop("prompt"), options.pop("steps"), **options)
