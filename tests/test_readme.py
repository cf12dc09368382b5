"""The README's Python examples run as written and return what their comments say."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readmes_python_examples_run_and_return_what_they_say():
    blocks = _python_blocks()
    assert len(blocks) == 3
    namespace: dict = {}
    torch.manual_seed(0)

    exec(compile(blocks[0], "README.md (attenders)", "exec"), namespace)
    out, padding = namespace["out"], namespace["padding"]
    assert out.glimpse.shape == (4, 5, 128) and out.weights.shape == (4, 5, 9)
    assert torch.allclose(out.weights.sum(dim=-1), torch.ones(4, 5))
    assert (out.weights[0, :, 7:] == 0).all() and not padding[1:].any()

    exec(compile(blocks[1], "README.md (other mechanisms)", "exec"), namespace)
    pooled = namespace["out"]
    assert pooled.context.shape == (8, 100) and pooled.weights.shape == (8, 10_000)

    exec(compile(blocks[2], "README.md (Transformer)", "exec"), namespace)
    assert namespace["out"].logits.shape == (4, 6, 20)
    assert namespace["maps"].shape == (4, 2, 4, 6, 9)
    decoded = namespace["decoded"]
    assert decoded.tokens.size(0) == 4 and decoded.tokens.size(1) <= 30
