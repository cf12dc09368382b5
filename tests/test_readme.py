"""The README's Python examples run as written and return what their comments say."""

import ast
import re
from pathlib import Path

import torch

from attnlab.experiments.registry import resolve_config

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def _run(block: str, name: str) -> dict:
    """Run one block on its own, as a reader who copies it would: nothing from the others."""
    namespace: dict = {}
    exec(compile(block, f"README.md ({name})", "exec"), namespace)
    return namespace


def test_the_readmes_python_examples_run_and_return_what_they_say():
    blocks = _python_blocks()
    assert len(blocks) == 4
    torch.manual_seed(0)

    namespace = _run(blocks[0], "attenders")
    out, padding = namespace["out"], namespace["padding"]
    assert out.glimpse.shape == (4, 5, 128) and out.weights.shape == (4, 5, 9)
    assert torch.allclose(out.weights.sum(dim=-1), torch.ones(4, 5))
    assert (out.weights[0, :, 7:] == 0).all() and not padding[1:].any()

    pooled = _run(blocks[1], "other mechanisms")["out"]
    assert pooled.context.shape == (8, 100) and pooled.weights.shape == (8, 10_000)

    namespace = _run(blocks[2], "Transformer")
    assert namespace["out"].logits.shape == (4, 6, 20)
    assert namespace["maps"].shape == (4, 2, 4, 6, 9)
    decoded = namespace["decoded"]
    assert decoded.tokens.size(0) == 4 and decoded.tokens.size(1) <= 30


def test_the_readmes_transformer_example_has_the_settings_of_the_config_it_names():
    block = _python_blocks()[2]
    named = re.search(r"the settings of the built-in config\s+`(\w+)`", README.read_text())
    assert named is not None
    config = resolve_config(named.group(1), [])["model"]["transformer"]
    (call,) = [
        node
        for node in ast.walk(ast.parse(block))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TransformerSeq2Seq"
    ]
    shown = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
    del shown["source_vocab_size"], shown["target_vocab_size"]  # the data's, not the config's
    assert shown == {key: config[key] for key in shown}


def test_the_readmes_translation_example_decodes_a_trained_run(make_scan_files, tmp_path, monkeypatch):
    from attnlab.cli import main

    files = make_scan_files("readme_translate", 200, 20)
    monkeypatch.chdir(tmp_path)
    overrides = [
        "data.split=files",
        f"data.train_file={files['train']}",
        f"data.test_files={{test: {files['test']}}}",
        "model.embedding_dim=16",
        "model.encoder_hidden_dim=16",
        "model.decoder_hidden_dim=32",
        "training.epochs=1",
        "training.progress=false",
    ]
    assert main(["train", "scan", *overrides, "--run-dir", "runs/scan"]) == 0
    namespace = _run(_python_blocks()[3], "translation")
    first, translations = namespace["first"], namespace["result"]["translations"]
    assert len(translations) == 2 and first["source"] == "jump twice after walk left".split()
    assert all(isinstance(token, str) for token in first["output"])
    assert len(first["attention"]) == len(first["output"]) + first["stopped"]
    assert all(abs(sum(weights) - 1) < 1e-5 for weights in first["attention"])
