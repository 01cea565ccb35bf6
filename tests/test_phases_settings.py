"""Server settings a format needs and its log may not state (``FormatOption`` rows): SGLang's
``decode_log_interval`` read from the log's ``server_args=ServerArgs(…)`` line where it is
there, else the ``phases`` option, else the server's default — and every word about it, the
option itself and the JSON derived from the row."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.cli.phases_cmd import format_setting_options, phases_command
from ncuflow.phases.detect import load_traces
from ncuflow.phases.model import ServerTrace, analyse_server_trace
from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.results import PhaseKind
from ncuflow.phases.model.settings import SettingSource
from ncuflow.phases.parse import registry
from ncuflow.phases.parse.format import LogReading
from ncuflow.phases.parse.registry import format_options
from ncuflow.phases.parse.sglang import DECODE_LOG_INTERVAL
from ncuflow.phases.pipeline import build_report
from ncuflow.phases.text import render_text
from tests.phases_toy_ticks import STEP_S, TICK_FORMAT, TICK_INTERVAL, TICKS, tick_log
from tests.test_phases_synthetic import sglang_log_lines

STEPS = 100  # the server's real interval in these logs; not SGLang's default
assert DECODE_LOG_INTERVAL.default != STEPS


def server_args_line(value: int | str) -> str:
    """SGLang's launch line, as it prints its arguments (a few of its many fields)."""
    return (
        "[2026-01-04 06:59:58] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1, "
        f"mem_fraction_static=0.88, {DECODE_LOG_INTERVAL.name}={value}, enable_metrics=False)"
    )


def write_log(tmp_path: Path, *, stated: int | str | None) -> Path:
    lines = sglang_log_lines(batch=16, admissions=4, ramp_s=1.0, step_s=0.02, steady_lines=10, interval=STEPS)
    path = tmp_path / "server.log"
    path.write_text("\n".join(([server_args_line(stated)] if stated is not None else []) + lines) + "\n")
    return path


def only_trace(path: Path, reading: LogReading | None = None) -> ServerTrace:
    (trace,) = load_traces(path, reading)
    assert isinstance(trace, ServerTrace)
    return trace


def test_the_log_s_own_statement_is_used_and_named(tmp_path: Path) -> None:
    trace = only_trace(write_log(tmp_path, stated=STEPS))
    setting = trace.steps_per_line
    assert setting is not None and (setting.value, setting.source, setting.line) == (STEPS, SettingSource.LOG, 1)
    (run,) = analyse_server_trace(trace)
    assert f"{DECODE_LOG_INTERVAL.name} {STEPS}, {setting.provenance()}" in run.timing.step_method
    assert not any(DECODE_LOG_INTERVAL.flag in note for note in run.findings.notes)


def test_without_a_statement_the_default_is_assumed_and_flagged(tmp_path: Path) -> None:
    trace = only_trace(write_log(tmp_path, stated=None))
    assert trace.steps_per_line is not None and trace.steps_per_line.source is SettingSource.DEFAULT
    (run,) = analyse_server_trace(trace)
    assert any(f"not {DECODE_LOG_INTERVAL.default}" in note and DECODE_LOG_INTERVAL.flag in note
               for note in run.findings.notes)


def test_the_option_fills_in_where_the_log_is_silent(tmp_path: Path) -> None:
    reading = LogReading(given={DECODE_LOG_INTERVAL.name: STEPS})
    trace = only_trace(write_log(tmp_path, stated=None), reading)
    assert trace.steps_per_line is not None
    assert (trace.steps_per_line.value, trace.steps_per_line.source) == (STEPS, SettingSource.OPTION)
    (run,) = analyse_server_trace(trace)
    assert not any(DECODE_LOG_INTERVAL.flag in note for note in run.findings.notes)


def test_an_option_the_log_contradicts_is_named_and_the_log_wins(tmp_path: Path) -> None:
    given = STEPS // 2
    trace = only_trace(write_log(tmp_path, stated=STEPS), LogReading(given={DECODE_LOG_INTERVAL.name: given}))
    assert trace.steps_per_line is not None and trace.steps_per_line.value == STEPS
    notes = [e.text for e in trace.events if e.kind == "note"]
    assert any(f"{DECODE_LOG_INTERVAL.flag} {given}" in n and f"={STEPS}" in n for n in notes), notes


@pytest.mark.parametrize("stated", ["0", "12345678901", "40x", "-5", "nan"])
def test_a_statement_out_of_range_or_malformed_is_not_taken(tmp_path: Path, stated: str) -> None:
    trace = only_trace(write_log(tmp_path, stated=stated))
    assert trace.steps_per_line is not None and trace.steps_per_line.source is SettingSource.DEFAULT


def test_every_format_option_is_a_phases_option_from_its_row() -> None:
    params = {p.name: p for p in phases_command.params}
    assert format_options(), "the registry declares SGLang's decode_log_interval"
    for log_format, option in format_options():
        param = params[option.name]
        assert isinstance(param, click.Option) and param.opts == [option.flag]
        assert param.help is not None and option.help in param.help and log_format.capabilities.server in param.help
        assert param.default is None  # unset: the log's own statement, else the default


def test_json_carries_the_value_used_and_where_it_came_from(tmp_path: Path) -> None:
    path = write_log(tmp_path, stated=STEPS)
    result = CliRunner().invoke(cli, ["phases", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data[DECODE_LOG_INTERVAL.name] == DECODE_LOG_INTERVAL.default  # the option's value (schema 2 key)
    (file,) = data["files"]
    assert file["settings"][DECODE_LOG_INTERVAL.name] == {
        "value": STEPS, "source": SettingSource.LOG.value, "line": 1, "given": None,
    }


@pytest.mark.parametrize("value", [DECODE_LOG_INTERVAL.minimum - 1, DECODE_LOG_INTERVAL.maximum + 1])
def test_the_option_refuses_values_out_of_its_range(tmp_path: Path, value: int) -> None:
    path = write_log(tmp_path, stated=None)
    result = CliRunner().invoke(cli, ["phases", str(path), DECODE_LOG_INTERVAL.flag, str(value)])
    assert result.exit_code == 2 and DECODE_LOG_INTERVAL.flag in result.output


# --- a toy step-counted format: its option from its row, its words and no other row's -------

def _other_rows_words() -> set[str]:
    """Every word a registered format's row puts in sentences (its capabilities' words and
    its options), less those the toy shares: none may reach the toy's report."""
    words: set[str] = set()
    for log_format in (f for f in registry.LINE_FORMATS if f is not TICK_FORMAT):
        caps = log_format.capabilities
        words |= {getattr(caps, f.name) for f in fields(caps) if f.name in WORD_FIELDS}
        words |= {o.flag for o in log_format.options} | {o.name for o in log_format.options}
    toy = {getattr(TICKS, f) for f in WORD_FIELDS}
    return {w for w in words if w and w not in toy}


def _word_fields() -> tuple[str, ...]:
    """Every field of a format's row that is words for sentences (its text fields)."""
    return tuple(f.name for f in fields(Capabilities) if f.type in (str, "str"))


WORD_FIELDS = _word_fields()


@pytest.mark.parametrize("with_rate", [True, False])
@pytest.mark.parametrize("stated", [True, False])
def test_a_step_counted_toy_format_speaks_its_own_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stated: bool, with_rate: bool
) -> None:
    monkeypatch.setattr(registry, "LINE_FORMATS", (*registry.LINE_FORMATS, TICK_FORMAT))
    steps = 2 * TICK_INTERVAL.default
    path = tmp_path / "ticks.log"
    path.write_text("\n".join(tick_log(steps=steps, stated=stated, with_rate=with_rate)) + "\n")
    report = build_report([path])
    (file,) = report.files
    (run,) = file.runs
    (setting,) = file.settings
    assert (setting.value, setting.source) == ((steps, SettingSource.LOG) if stated else (TICK_INTERVAL.default, SettingSource.DEFAULT))
    step_s = STEP_S if with_rate else STEP_S * steps / setting.value  # without a rate: Δt over the steps assumed
    assert run.phase(PhaseKind.STEADY).token_s is not None
    assert run.phase(PhaseKind.STEADY).token_s.median == pytest.approx(step_s, rel=0.05)
    text = render_text(report) + "\n".join(run.findings.notes + run.findings.cannot) + run.timing.step_method
    assert TICKS.stats_line in text
    leaked = sorted(w for w in _other_rows_words() if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text))
    assert not leaked, leaked
    mismatch = [n for n in run.findings.notes if TICK_INTERVAL.flag in n]
    assert bool(mismatch) is (with_rate and not stated)  # the default assumed, the timestamps say twice as many


def test_a_format_option_reaches_the_command_line_from_its_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "LINE_FORMATS", (*registry.LINE_FORMATS, TICK_FORMAT))

    @format_setting_options
    def command(**given: object) -> None:
        pass

    params = {p.name: p for p in click.command()(command).params}
    assert set(params) == {o.name for _, o in registry.format_options()}
    assert params[TICK_INTERVAL.name].opts == [TICK_INTERVAL.flag] and TICKS.server in (params[TICK_INTERVAL.name].help or "")
