"""The benchmark harness at a tiny scale: it runs end to end and reports every figure.

A smoke test only: it checks that the output is complete and well formed, never how fast anything is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # bench/ is not an installed package; it runs from the repository root
    sys.path.insert(0, str(REPO))


def test_bench_run_quick_reports_every_figure(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    command = [
        sys.executable, "-m", "bench.run", "--quick", "--sessions", "200", "--small-sessions", "400",
        "--calls", "30", "--round", "10", "--rescan-calls", "3", "--lag-writes", "10",
        "--corpus-dir", str(tmp_path / "corpora"), "--out-dir", str(out_dir),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-6000:]

    results = json.loads((out_dir / "benchmarks.json").read_text())
    assert results["errors"] == {}, results["errors"]
    assert set(results["profiles"]) == {"short", "long"}, "both corpus profiles by default"
    from bench.report import CASES, REQUIRED, missing_figures

    assert len(REQUIRED) > 60
    for profile, measured in results["profiles"].items():
        assert measured["missing_figures"] == [], (profile, measured["missing_figures"])
        assert missing_figures(measured) == []
        steps = measured["steps"]
        assert steps["corpus_main"]["profile"] == profile
        assert steps["corpus_main"]["inputs"]["count"] > 0
        for step in ("inprocess_main", "stdio_main", "inprocess_small"):
            assert set(steps[step]["cases"]) == set(CASES)
            for case in steps[step]["cases"].values():
                assert case["calls"] == 30
        assert steps["floor_main"]["floor_s"] > 0 and steps["floor_main"]["parse_s"] > 0
        assert steps["rescan_main"]["same_answer_as_inprocess"] is True
        assert steps["rebuild_main"]["noop_files_read"] == 0
        assert steps["rebuild_main"]["changed_files_read"] == 1
        assert steps["watcher_main"]["writes"] == 10
        # Every target has a measured value and a verdict (met or not is not this test's business).
        assert len(measured["targets"]) >= 18
        assert all(isinstance(row["value"], float | int) and row["met"] in (True, False) for row in measured["targets"])
    long_inputs = results["profiles"]["long"]["steps"]["corpus_main"]["inputs"]
    assert long_inputs["median"] > results["profiles"]["short"]["steps"]["corpus_main"]["inputs"]["median"]
    for key in ("cpu", "cores", "ram_gb", "python", "sqlite", "msgspec", "mcp"):
        assert results["machine"][key], key
    assert results["command"].startswith("python -m bench.run --quick")

    markdown = (out_dir / "benchmarks.md").read_text()
    for heading in ("## Machine", "# Short inputs", "# Long pasted inputs", "## Against issue 4's targets",
                    "## 1. Cold build", "## 2. Rebuilds", "## 3. and 4. Tool calls", "## 5. The rescan",
                    "## 6. Watcher lag", "## Memory"):  # fmt: skip
        assert heading in markdown, heading
    assert markdown.count("## 1. Cold build") == 2
    assert results["command"] in markdown
    assert "not measured" not in markdown
    # Corpora and the work directory: the corpora are kept for reuse, the indexes are not.
    corpora = sorted(p.name for p in (tmp_path / "corpora").iterdir())
    names = ["s200-seed42-x0.05", "s400-seed42-x0.01"]
    assert corpora == sorted(f"{prefix}{name}{suffix}" for prefix in ("", "long-") for name in names
                             for suffix in ("", ".summary.json"))  # fmt: skip


def test_a_rewritten_report_keeps_the_notes_below_the_marker(tmp_path: Path) -> None:
    from bench.report import KEEP_MARKER, write_markdown

    path = tmp_path / "benchmarks.md"
    results = {"profiles": {"short": {"steps": {}, "targets": []}}, "command": "python -m bench.run", "date": "today"}
    write_markdown(results, path)
    text = path.read_text()
    assert KEEP_MARKER in text
    path.write_text(text.split(KEEP_MARKER)[0] + KEEP_MARKER + "\n\n## Profile\n\nhand-written\n")
    write_markdown({**results, "date": "tomorrow"}, path)
    text = path.read_text()
    assert "tomorrow" in text and "hand-written" in text and text.count(KEEP_MARKER) == 1


def test_bench_initialize_reports_every_figure(tmp_path: Path) -> None:
    corpus = tmp_path / "sessions"
    subprocess.run([sys.executable, "-m", "bench.gen_corpus", "--sessions", "50", "--seed", "1", "--out", str(corpus),
                    "--scale-bytes", "0.01"], cwd=REPO, check=True, capture_output=True, timeout=60)  # fmt: skip
    out = tmp_path / "init.json"
    command = [sys.executable, "-m", "bench.initialize", "--sessions-dir", str(corpus), "--rounds", "2",
               "--cold-rounds", "1", "--json", str(out)]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-6000:]
    results = json.loads(out.read_text())
    for server, rounds in (("floor", 2), ("warm", 2), ("cold", 1)):
        for answer in ("initialize", "tools_list"):
            figures = results[server][answer]
            assert figures["rounds"] == rounds and 0 < figures["min_s"] <= figures["p50_s"] <= figures["max_s"]
        assert results[server]["initialize"]["p50_s"] <= results[server]["tools_list"]["p50_s"]


def test_bench_tree_reports_every_case(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "bench.tree", "--dir", str(tmp_path), "--children", "3", "--per-child", "2",
        "--total", "30", "--others", "10", "--calls", "20", "--round", "5", "--json", str(tmp_path / "tree.json"),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-6000:]
    result = json.loads((tmp_path / "tree.json").read_text())
    assert result["tree"]["conversations"] == 30
    cases = result["cases"]
    assert set(cases) == {"children", "descendants", "ids_100", "descendants_page_2"}
    assert all(not case["is_error"] and case["calls"] == 20 for case in cases.values())
    assert cases["children"]["returnedCount"] == 3 and cases["descendants"]["returnedCount"] == 20
    assert "| descendants |" in done.stdout
