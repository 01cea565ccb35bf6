"""``phases --sweep-for``: a sweep file from a shared SGLang log, for both built-in decode cells
and a user cell, accepted by ``sweep --dry-run``; written atomically, never over a foreign file."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cells.registry import get_cell
from ncuflow.cli import cli
from ncuflow.phases.sweep_for import HEADER
from ncuflow.serving import ServingShape
from tests.test_phases_shapes import phases, shapes_of

LOG = "shun8686_qwen3-32b_eagle3_tp4_c78.log"


def sweep_for(log: Path, out: Path, *extra: str) -> dict:
    result = CliRunner().invoke(cli, ["phases", str(log), "--json", "-o", str(out), *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["sweep"]


@pytest.mark.parametrize("cell", ["flat_decode", "paged_decode"])
def test_sweep_for_a_decode_cell_is_accepted_by_dry_run(serving_logs_dir: Path, tmp_path: Path, cell: str) -> None:
    out = tmp_path / "sweep.toml"
    vary = ["--vary", "page=1,16,128"] if cell == "paged_decode" else ["--vary", "layout=contiguous,scatter"]
    sweep = sweep_for(serving_logs_dir / LOG, out, "--sweep-for", cell, *vary)
    data = tomllib.loads(out.read_text())
    # the steady stretch's own spread, through the contract's rows (batch <- decode_batch, ...)
    steady = next(s for s in shapes_of(serving_logs_dir, LOG).runs[1].stretches if s.name == "steady")
    assert steady.kv_len is not None
    rows = dict(get_cell(cell).serving_rows())
    by_shape = {shape: param for param, shape in rows.items()}
    assert data["axes"][by_shape[ServingShape.DECODE_BATCH]] == [78]
    assert data["axes"][by_shape[ServingShape.KV_LEN]] == sorted(
        {round(steady.kv_len.p10), round(steady.kv_len.median), round(steady.kv_len.p90)})
    assert data["cell"] == cell and out.read_text().startswith(HEADER)
    assert any("cannot take speculative" in t for t in sweep["not_taken"])
    # the run's prefill batches (3584 tokens a prompt, several per batch) are no decode cell's shape
    prefill = shapes_of(serving_logs_dir, LOG).runs[1].run.prefill_chunk
    assert prefill is not None and prefill.median == 3584
    spread = sorted({round(prefill.p10), round(prefill.median), round(prefill.p90)})
    assert f"{cell} cannot take prefill_chunk {spread}" in sweep["not_taken"]
    dry = CliRunner().invoke(cli, ["sweep", "--dry-run", str(out)])
    assert dry.exit_code == 0, dry.output
    points = 3 * len(vary[1].split(","))
    assert sweep["points"] == points and f"{points} points" in dry.output


def test_settings_reach_the_cell_only_where_its_choices_hold_them(serving_logs_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep.toml"
    sweep = sweep_for(serving_logs_dir / LOG, out, "--sweep-for", "paged_decode",
                      "--setting", "page_size=64", "--setting", "kv_dtype=fp8_e5m2")
    data = tomllib.loads(out.read_text())
    assert data["fixed"] == {"page": 64}
    assert any(t.startswith("dtype (kv_dtype): the server's 'fp8_e5m2' is not among") for t in sweep["not_taken"])
    flat = sweep_for(serving_logs_dir / LOG, tmp_path / "flat.toml", "--sweep-for", "flat_decode",
                     "--setting", "page_size=64")
    assert "flat_decode cannot take page_size 64" in flat["not_taken"]


USER_CELL = '''
from ncuflow.cells import CellDefinition, ParamSpec
from ncuflow.serving import ServingShape

def build(params, device):
    raise NotImplementedError

CELL = CellDefinition(
    name="my_decode",
    params=(ParamSpec("requests", int, 8, None, "batch", 1, None, ServingShape.DECODE_BATCH),
            ParamSpec("context", int, 1024, None, "KV per request", 1, None, ServingShape.KV_LEN),
            ParamSpec("unrolled", bool, False, None, "unroll")),
    description="a user decode cell",
    build=build,
)
'''


def test_sweep_for_a_user_cell_goes_through_its_declarations(serving_logs_dir: Path, tmp_path: Path) -> None:
    cells = tmp_path / "cells"
    cells.mkdir()
    (cells / "my_decode.py").write_text(USER_CELL)
    out = tmp_path / "sweep.toml"
    sweep_for(serving_logs_dir / LOG, out, "--sweep-for", "my_decode", "--cells-dir", str(cells),
              "--vary", "unrolled=true,false")
    data = tomllib.loads(out.read_text())
    assert set(data["axes"]) == {"requests", "context", "unrolled"} and data["axes"]["requests"] == [78]
    dry = CliRunner().invoke(cli, ["sweep", "--dry-run", "--cells-dir", str(cells), str(out)])
    assert dry.exit_code == 0, dry.output


def test_the_sweep_file_is_never_written_over_a_foreign_file(serving_logs_dir: Path, tmp_path: Path) -> None:
    log = serving_logs_dir / LOG
    mine = tmp_path / "notes.toml"
    mine.write_text("# my own notes\n")
    code, out = phases(str(log), "--sweep-for", "flat_decode", "-o", str(mine))
    assert code == 2 and "Refusing to overwrite" in out and "Traceback" not in out
    assert mine.read_text() == "# my own notes\n"
    link = tmp_path / "link.toml"
    os.symlink(mine, link)
    assert phases(str(log), "--sweep-for", "flat_decode", "-o", str(link))[0] == 2
    assert mine.read_text() == "# my own notes\n"
    ours = tmp_path / "sweep.toml"
    for _ in range(2):  # its own earlier file is replaced
        assert phases(str(log), "--sweep-for", "flat_decode", "-o", str(ours))[0] == 0
    ours_link = tmp_path / "ours-link.toml"
    os.symlink(ours, ours_link)  # a link to its own earlier file is written through and stays a link
    assert phases(str(log), "--sweep-for", "paged_decode", "-o", str(ours_link))[0] == 0
    assert os.path.islink(ours_link) and tomllib.loads(ours.read_text())["cell"] == "paged_decode"
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    code, out = phases(str(log), "--sweep-for", "flat_decode", "-o", str(fifo))
    assert code == 2 and "FIFO" in out
    assert phases(str(log), "--sweep-for", "flat_decode", "-o", str(log))[0] == 2  # never over its input
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.toml", "link.toml", "notes.toml", "ours-link.toml",
                                                         "sweep.toml"]


@pytest.mark.parametrize(("args", "said"), [
    (["--sweep-for", "no_such_cell", "-o", "x.toml"], "no cell named"),
    (["--sweep-for", "flat_decode", "-o", "x.toml", "--vary", "page=1,16"], "no parameter of cell"),
    (["--sweep-for", "flat_decode"], "go together"),
    (["--vary", "page=1"], "--sweep-for"),
    (["--sweep-for", "flat_decode", "-o", "x.toml", "--vary", "page"], "PARAM=V1,V2"),
    (["--sweep-for", "paged_decode", "-o", "x.toml", "--vary", "page=1,\x1b[31m"], "printable"),
    (["--sweep-for", "paged_decode", "-o", "x.toml", "--vary", "page=7"], "not one of its choices"),
    (["--sweep-for", "paged_decode", "-o", "x.toml", "--vary", 'dtype="x\\y'], "not one of its choices"),
    (["--setting", "kv_dtype=a\u2028b"], "printable"),
])
def test_sweep_for_refusals_are_one_paragraph(serving_logs_dir: Path, tmp_path: Path, args: list[str], said: str) -> None:
    os.chdir(tmp_path)
    code, out = phases(str(serving_logs_dir / LOG), *args)
    assert code == 2 and said in out and "Traceback" not in out
    assert not (tmp_path / "x.toml").exists()


def test_every_built_in_cell_that_declares_a_shape_gets_a_sweep_dry_run_accepts(serving_logs_dir: Path,
                                                                                 tmp_path: Path) -> None:
    from ncuflow.cells.registry import cell_definitions

    declaring = sorted(name for name, d in cell_definitions().items() if d.serving_rows())
    assert {"flat_decode", "paged_decode"} <= set(declaring)
    for name in declaring:
        out = tmp_path / f"{name}.toml"
        sweep = sweep_for(serving_logs_dir / LOG, out, "--sweep-for", name, "--setting", "page_size=16")
        rows = dict(get_cell(name).serving_rows())
        data = tomllib.loads(out.read_text())
        for param, shape in rows.items():  # each declared parameter is set from the log, or named
            set_here = param in data["axes"] or param in data["fixed"]
            assert set_here or any(t.startswith(f"{param} ({shape.value})") for t in sweep["not_taken"]), (name, param)
        dry = CliRunner().invoke(cli, ["sweep", "--dry-run", str(out)])
        assert dry.exit_code == 0, (name, dry.output)
