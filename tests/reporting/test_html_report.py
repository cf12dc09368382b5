"""The static HTML report, checked in a real headless browser (Debian's chromium, driven over the
DevTools protocol on a pipe): no console errors, the expected table rows, images that render."""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from attnlab.config import ConfigError
from attnlab.experiments.runner import LocalBackend
from attnlab.experiments.sweep import load_spec, run_sweep
from attnlab.plotting.attention import plot_attention_heatmap
from attnlab.reporting.html import build_report, markdown_to_html

TABLE1 = """# Table 1

| problem | T0 | ours | paper |
|---|---:|---:|---:|
| addition | 50 | 1 | 1 |
| multiplication | 50 | 2 | 1 |
"""


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory, tiny_memory_addition: list[str]) -> Path:
    """A recipe-like folder (a table, a figure) and a sweep of two runs, one with a heatmap."""
    root = tmp_path_factory.mktemp("runs")
    (root / "raffel2015").mkdir()
    (root / "raffel2015" / "table1.md").write_text(TABLE1)
    plot_attention_heatmap(
        np.full((2, 3), 1 / 3), ["a", "b", "c"], ["x", "y"], root / "raffel2015" / "fig.png"
    )
    spec = root.parent / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "config": "memory_addition",
                "overrides": [*tiny_memory_addition, "training.epochs=2"],
                "grid": {"model.pooling": ["attention", "mean"]},
            }
        )
    )
    report = run_sweep(load_spec(spec), root / "sweep", LocalBackend(1), log=lambda line: None)
    assert report.ok
    weights = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]])
    plot_attention_heatmap(
        weights,
        ["1", "2", "3"],
        ["p", "q"],
        root / "sweep" / "model.pooling=attention" / "seed0" / "plots" / "attention.png",
    )
    failed = root / "sweep" / "broken" / "seed0"  # a failed run: config and traceback only
    failed.mkdir(parents=True)
    (failed / "config.yaml").write_text("experiment: memory\n")
    (failed / "error.txt").write_text("Traceback (most recent call last):\nRuntimeError: <boom> & co\n")
    return root


def test_report_is_self_contained(runs_dir, tmp_path):
    page = build_report(runs_dir, tmp_path / "report.html").read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert page.count("data:image/png;base64,") == 1 + 2 + 1  # a figure, 2 learning curves, a heatmap
    assert "RuntimeError: &lt;boom&gt; &amp; co" in page  # escaped


def test_each_run_says_where_its_training_sessions_ran(runs_dir, tmp_path):
    page = build_report(runs_dir, tmp_path / "report.html").read_text()
    tables = re.findall(r"<table class='environment'>(.*?)</table>", page, re.S)
    assert len(tables) == 2  # the two trained runs; the failed one has no record
    for table in tables:
        (row,) = re.findall(r"<tbody><tr>(.*?)</tr></tbody>", table)
        cells = re.findall(r"<td>(.*?)</td>", row)
        assert cells[1:3] == ["0", "cpu"] and cells[5] == torch.__version__


def test_markdown_tables_become_html_tables():
    html = markdown_to_html(TABLE1)
    assert html.startswith("<h3>Table 1</h3>")
    assert "<th>problem</th>" in html and html.count("<tr>") == 3 and "<td>multiplication</td>" in html


def test_empty_or_absent_runs_directory_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="holds no run directories"):
        build_report(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        build_report(tmp_path / "absent")


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_report_in_a_headless_browser(runs_dir, tmp_path):
    path = build_report(runs_dir, tmp_path / "report.html")
    with DevToolsBrowser(CHROMIUM, tmp_path / "profile") as browser:
        page = browser.open(path.resolve().as_uri())
        result = browser.evaluate(
            page,
            """(() => {
                document.querySelectorAll('details').forEach(d => { d.open = true; });
                const rows = t => [...t.querySelectorAll('tbody tr')].map(r => r.cells[0].textContent);
                return {
                    tables: [...document.querySelectorAll('table')].map(rows),
                    statuses: [...document.querySelectorAll('table.runs tbody tr')]
                        .map(r => r.cells[1].textContent),
                    images: [...document.images].map(i => {
                        const box = i.getBoundingClientRect();
                        return [i.alt, i.complete, i.naturalWidth, i.naturalHeight, box.width, box.height];
                    }),
                };
            })()""",
        )
        errors = browser.errors
    assert errors == []
    tables = result["tables"]
    assert ["addition", "multiplication"] in tables  # the recipe's table, beside the paper
    sweep_rows = [table for table in tables if any("·" in row for row in table)]
    assert sweep_rows == [["model.pooling=attention · test", "model.pooling=mean · test"]]
    assert [
        "sweep/broken/seed0",
        "sweep/model.pooling=attention/seed0",
        "sweep/model.pooling=mean/seed0",
    ] in tables
    assert result["statuses"] == ["failed", "done", "done"]
    assert len(result["images"]) == 4
    for alt, complete, width, height, box_width, box_height in result["images"]:
        assert complete and width > 0 and height > 0 and box_width > 0 and box_height > 0, alt


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_the_browser_check_sees_errors_and_broken_images(tmp_path):
    """The check above is meaningful: a console error, an exception and a broken image are seen."""
    bad = tmp_path / "bad.html"
    bad.write_text("<img src='missing.png' alt='x'><script>console.error('bad'); undefinedCall();</script>")
    with DevToolsBrowser(CHROMIUM, tmp_path / "profile") as browser:
        page = browser.open(bad.resolve().as_uri())
        width = browser.evaluate(page, "document.images[0].naturalWidth")
        errors = browser.errors
    assert width == 0
    assert any("bad" in error for error in errors) and any("undefinedCall" in error for error in errors)
    assert any("missing.png" in error for error in errors)


def _fake_run(root: Path, name: str, experiment: str, summary: dict | None) -> None:
    """A run directory as the experiments leave it: its config, and its test metrics when done."""
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"experiment": experiment, "training": {"seed": 0}}))
    if summary is not None:
        (run / "eval").mkdir()
        (run / "eval" / "summary.json").write_text(json.dumps(summary))


SEQ2SEQ = {"seq_acc": 97.5, "seq_acc_be": 98.0, "loss": 0.0123, "examples": 500.0}


@pytest.fixture(scope="module")
def mixed_runs_dir(tmp_path_factory) -> Path:
    """A folder holding runs of all four experiments, with their real test sets and metric names:
    Lookup Tables (interpolation, long 1-4, attnLoss), memory problems, SCAN / English–French and
    language models (WikiText-2 splits and the four CBT word classes): 40 metric columns in all."""
    root = tmp_path_factory.mktemp("mixed")
    for attender in ("location", "content", "mix", "transformer_xl"):
        tests = {"interpolation": {**SEQ2SEQ, "attn_loss": 0.5}}
        tests.update({f"long{level}": {**SEQ2SEQ, "attn_loss": 2.25} for level in range(1, 5)})
        _fake_run(root, f"dubois2020/long_lookup_tables/{attender}_guided_attention/seed0", "lookup", tests)
    for pooling in ("attention", "mean"):
        memory = {"test": {"accuracy": 99.25, "mse": 0.000412, "examples": 1000}}
        _fake_run(root, f"raffel2015/addition/t0_1000/{pooling}/seed0", "memory", memory)
    _fake_run(
        root,
        "raffel2015/temporal_order/t0_100/attention/seed0",
        "memory",
        {
            "test": {
                "accuracy": 100.0,
                "cross_entropy": 0.003,
                "examples": 1000,
                "accuracy_XX_YY": 100.0,
                "accuracy_XY_YX": 100.0,
            }
        },
    )
    scan = {"test": {**SEQ2SEQ, "seq_acc_given_length": 99.0}}
    _fake_run(root, "russin2019/table1/addprim_jump/syntactic_attention/seed0", "scan", scan)
    french = {**SEQ2SEQ, "bleu": 31.7, "unknown_source_words": 12.0, "unknown_target_words": 30.0}
    _fake_run(
        root, "russin2019/mt/syntactic_attention/seed0", "scan", {"test": french, "test_no_unk": french}
    )
    _fake_run(root, "russin2019/table1/length/syntactic_attention/seed1", "scan", None)  # still running
    words = {"loss": 4.71, "perplexity": 111.2, "tokens": 245569}
    cbt = {"accuracy": 0.412, "questions": 2500}
    language_model = {"valid": words, "test": words, **{name: cbt for name in ("NE", "CN", "V", "P")}}
    for variant in ("lstm", "key_value_predict"):
        _fake_run(root, f"daniluk2017/wikitext2/{variant}/seed0", "language_model", language_model)
    return root


def test_runs_are_grouped_by_experiment_with_only_their_own_columns(mixed_runs_dir, tmp_path):
    page = build_report(mixed_runs_dir, tmp_path / "report.html").read_text()
    groups = re.findall(r"<table class='runs' data-experiment='(\w+)'>(.*?)</table>", page, re.S)
    assert [experiment for experiment, _ in groups] == ["language_model", "lookup", "memory", "scan"]
    headers = {
        experiment: re.sub(r"<wbr>", "", " ".join(re.findall(r"<th>(.*?)</th>", table)))
        for experiment, table in groups
    }
    assert headers["memory"] == "run status test set accuracy mse cross_entropy accuracy_XX_YY accuracy_XY_YX"
    assert headers["lookup"] == "run status test set seq_acc seq_acc_be loss attn_loss"
    assert "bleu" in headers["scan"] and "accuracy" not in headers["scan"]
    assert "perplexity" in headers["language_model"] and "seq_acc" not in headers["language_model"]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_a_report_of_many_kinds_of_runs_fits_a_laptop_screen(mixed_runs_dir, tmp_path):
    """Issue 25: one table per kind of run, each within a 1366-px-wide window, every finished run's
    metrics visible (the memory and SCAN rows used to sit far right of the Lookup Tables columns)."""
    path = build_report(mixed_runs_dir, tmp_path / "report.html")
    with DevToolsBrowser(CHROMIUM, tmp_path / "profile") as browser:
        page = browser.open(path.resolve().as_uri(), width=1366, height=900)
        result = browser.evaluate(
            page,
            """(() => ({
                viewport: window.innerWidth,
                pageWidth: document.documentElement.scrollWidth,
                tables: [...document.querySelectorAll('table.runs')].map(t => ({
                    experiment: t.dataset.experiment,
                    right: t.getBoundingClientRect().right,
                    headers: [...t.querySelectorAll('th')].map(h => h.textContent),
                    rows: [...t.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => ({
                        column: c.dataset.column, text: c.textContent.trim(),
                        right: c.getBoundingClientRect().right,
                    }))),
                })),
            }))()""",
        )
        screenshot = browser.screenshot(page)
    (tmp_path / "report.png").write_bytes(screenshot)
    assert result["viewport"] == 1366
    assert result["pageWidth"] <= 1366  # no horizontal scrolling
    assert int.from_bytes(screenshot[16:20], "big") == 1366  # the PNG's width
    tables = {table["experiment"]: table for table in result["tables"]}
    assert sorted(tables) == ["language_model", "lookup", "memory", "scan"]
    for experiment, table in tables.items():
        assert table["right"] <= 1366, (experiment, table["right"], table["headers"])
        assert len(table["headers"]) <= 10, table["headers"]
        assert all(cell["right"] <= 1366 for row in table["rows"] for cell in row)

    def values(experiment: str, column: str) -> list[str]:
        cells = [cell for row in tables[experiment]["rows"] for cell in row]
        return [cell["text"] for cell in cells if cell["column"] == column]

    assert values("memory", "accuracy") == ["99.25", "99.25", "100"]
    assert values("memory", "mse") == ["0.000412", "0.000412", ""]
    assert values("scan", "seq_acc") == ["97.5", "97.5", "97.5", ""]  # the unfinished run: no metrics
    assert values("scan", "bleu") == ["31.7", "31.7", "", ""]
    assert values("scan", "status") == ["done", "done", "missing"]
    assert values("lookup", "attn_loss") == ["0.5", "2.25", "2.25", "2.25", "2.25"] * 4
    assert values("language_model", "perplexity") == ["111.2", "111.2", "", "", "", ""] * 2


class DevToolsBrowser:
    """Headless chromium driven over ``--remote-debugging-pipe`` (JSON messages ended by NUL)."""

    def __init__(self, executable: str, profile: Path, timeout_s: float = 60) -> None:
        self.executable, self.profile, self.timeout_s = executable, profile, timeout_s
        self.errors: list[str] = []
        self._next_id = 0
        self._buffer = b""

    def __enter__(self) -> DevToolsBrowser:
        to_browser_read, self._write = os.pipe()
        self._read, from_browser_write = os.pipe()

        def wire_pipes() -> None:  # the browser reads commands on fd 3 and writes replies on fd 4
            os.dup2(to_browser_read, 3)
            os.dup2(from_browser_write, 4)

        self.process = subprocess.Popen(
            [
                self.executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-pipe",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=wire_pipes,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._send("Browser.close")
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self._write)
            os.close(self._read)

    def open(self, url: str, width: int | None = None, height: int | None = None) -> str:
        """Open ``url`` in a new tab (a ``width`` × ``height`` px window when given), wait for its
        load event; return the session id."""
        target = self.command("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.command("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.command(f"{domain}.enable", session=session)
        if width is not None and height is not None:
            metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
            self.command("Emulation.setDeviceMetricsOverride", metrics, session=session)
        self.command("Page.navigate", {"url": url}, session=session)
        self._wait(lambda message: message.get("method") == "Page.loadEventFired")
        return session

    def screenshot(self, session: str) -> bytes:
        """A PNG of the window (what a reader sees without scrolling)."""
        data = self.command("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
        return base64.b64decode(data)

    def evaluate(self, session: str, expression: str) -> object:
        reply = self.command(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session
        )
        if "exceptionDetails" in reply:
            raise AssertionError(f"script failed: {reply['exceptionDetails']}")
        return reply["result"]["value"]

    def command(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        identifier = self._send(method, params, session)
        reply = self._wait(lambda message: message.get("id") == identifier)
        if "error" in reply:
            raise AssertionError(f"{method}: {reply['error']}")
        return reply["result"]

    def _send(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        self._next_id += 1
        message: dict = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _wait(self, wanted) -> dict:
        deadline = time.monotonic() + self.timeout_s
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                self._note_error(message)
                if wanted(message):
                    return message
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._read], [], [], remaining)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise ConnectionError("chromium closed the pipe")
            self._buffer += chunk

    def _note_error(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(str(params.get("exceptionDetails")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(str(params.get("args")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append(str(params["entry"]))


def test_each_seq2seq_run_says_how_its_wrong_outputs_are_wrong(runs_dir, tmp_path):
    """A run with predictions or errors files (an archived run keeps only these) gets one row per
    test set: examples, wrong, and each kind; an unreadable file says why in its row; runs without
    them get no such table."""
    root = tmp_path / "runs"
    shutil.copytree(runs_dir / "sweep", root / "sweep")
    eval_dir = root / "sweep" / "model.pooling=mean" / "seed0" / "eval"
    header = "example\tsource\ttarget\tprediction\tseq_acc\n"
    rows = ["0\tx\ta b\ta\t0\n", "1\tx\ta b\ta b c\t0\n", "2\tx\ta b\ta b\t1\n", "3\tx\ta b\tb b\t0\n"]
    (eval_dir / "long5.predictions.tsv").write_text(header + "".join(rows))
    (eval_dir / "long1.predictions.tsv").write_text(header + "0\tx\ta\n")
    archived = {"examples": 5000, "wrong": 12, "stops early": 10, "stops late": 2}
    archived |= {"wrong words, right length": 0, "wrong words, other length": 0}
    (eval_dir / "long2.errors.json").write_text(json.dumps(archived))
    page = build_report(root, tmp_path / "report.html").read_text()
    (table,) = re.findall(r"<table class='errors'>(.*?)</table>", page, re.S)
    body = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1])
    # an errors file from before the one-word counts, without its predictions: those read "–"
    assert re.findall(r"<td>(.*?)</td>", body[1]) == ["long2", "5,000", "12", "10", "2", "0", "0", "–", "–"]
    # "b b" for "a b" is wrong only where the target has "a"
    assert re.findall(r"<td>(.*?)</td>", body[2]) == ["long5", "4", "3", "1", "1", "1", "0", "1", "0"]
    assert body[0].startswith("<td>long1</td><td colspan='8'>") and "line 2: expected 5" in body[0]
