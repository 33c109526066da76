"""The app's flows on the real schemas, driven with Textual's pilot: build a statistics config from a starter
through the form, see a field error appear and clear, save it, load an msprobe config."""

import asyncio
import functools
import json
import os
import shutil
from pathlib import Path

from textual.widgets import Input, Select

import schemas
from probe_tui.app.app import ProbeApp
from probe_tui.app.form.model_form import all_rows
from probe_tui.app.form.spec import CONST, describe_model
from probe_tui.app.screens.builder import VALIDATE_DELAY_S, BuilderScreen
from probe_tui.app.screens.dump import DumpScreen
from probe_tui.app.screens.path_prompt import PathPrompt
from probe_tui.app.screens.start import StartScreen
from tests.app_pilot import wait_until

DATA = Path(__file__).resolve().parent / "data"


def pilot_test(coro_fn):
    @functools.wraps(coro_fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(coro_fn(*args, **kwargs))

    return wrapper


async def home(pilot):
    from probe_tui.app.screens.home import HomeScreen

    await wait_until(pilot, lambda: isinstance(pilot.app.screen, HomeScreen) and pilot.app.screen.is_mounted)


async def builder_up(pilot) -> BuilderScreen:
    """The builder once it is on screen with its form validated."""
    app = pilot.app
    await wait_until(pilot, lambda: isinstance(app.screen, BuilderScreen) and app.screen.is_mounted
                     and bool(app.screen.query("#form")), what="the config builder")
    await wait_until(pilot, lambda: not app.screen.building, what="the whole form mounted")
    await pilot.pause()
    return app.screen


def row(screen, path):
    return next(r for r in all_rows(screen.form) if r.path == path)


async def type_into(pilot, screen, path, text):
    """Focus a field's input, clear it and type ``text`` the way a person does."""
    row(screen, path).focus_control()
    await pilot.pause()
    await pilot.press("end", "ctrl+u", *list(text))
    await pilot.pause(VALIDATE_DELAY_S + 0.15)
    await wait_until(pilot, lambda: screen._timer is None, what="validation after typing")


def validate_messages(data):
    try:
        schemas.load_config(data)
    except schemas.ConfigError as exc:
        return {issue.path: issue.message for issue in exc.errors}
    return {}


@pilot_test
async def test_build_a_statistics_config_from_the_starter_and_save_it(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 40)) as pilot:
        await new_config(pilot)
        await pilot.press("enter")  # the first task: statistics
        builder = await builder_up(pilot)
        assert builder.task == "statistics"
        assert builder.validation.ok

        await type_into(pilot, builder, "target.demo.steps", "2")
        await type_into(pilot, builder, "step", "0, x")
        step = row(builder, "step")
        assert not builder.validation.ok
        expected = validate_messages(builder.collect())
        assert set(expected) == {"step[1]"}
        assert step.error == f"[1]: {builder.validation.issues[0].text}"
        assert expected["step[1]"] in step.error  # the message of `probe-tui validate`
        assert "1 error" in str(builder.query_one("#validity").render())

        await type_into(pilot, builder, "step", "0-1")
        assert builder.validation.ok and step.error is None

        level = row(builder, "level").query_one(Select)
        level.focus()
        await pilot.press("enter")  # open the choices
        await pilot.pause()
        await pilot.press("down", "enter")  # L1 -> mix
        await wait_until(pilot, lambda: level.value == "mix")
        await pilot.pause(VALIDATE_DELAY_S + 0.15)

        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, PathPrompt) and app.screen.is_mounted)
        assert app.screen.query_one(Input).value == "statistics.json"
        await pilot.press("ctrl+u", *"my_stats.json", "enter")
        await wait_until(pilot, lambda: app.screen is builder and builder.path == tmp_path / "my_stats.json")

    saved = json.loads((tmp_path / "my_stats.json").read_text())
    job = schemas.load_config(tmp_path / "my_stats.json")
    assert saved == schemas.dump_config(job)  # normalised, as `probe-tui validate` prints it
    assert job.task == "statistics" and job.level == "mix" and job.step == [0, 1]
    assert job.target.demo.steps == 2


@pilot_test
async def test_every_task_gets_a_form_from_its_schema(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 40)) as pilot:
        await home(pilot)
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await builder_up(pilot)
        for task, model in schemas.TASKS.items():
            builder.query_one("#task", Select).value = task
            await wait_until(pilot, lambda m=model: builder.form.model is m)
            await pilot.pause(0.2)
            await wait_until(pilot, lambda: builder._timer is None)
            assert builder.validation.ok, (task, [i.line() for i in builder.validation.issues])
            paths = {r.path for r in all_rows(builder.form)}
            assert task in paths  # the task's own section
            for spec in describe_model(model):  # every field has a row, except one-value Literals (task)
                assert spec.kind == CONST or spec.name in paths, (task, spec.name)


@pilot_test
async def test_load_an_msprobe_config(tmp_path):
    source = DATA / "configs" / "msprobe" / "reference_wheel_default.json"
    shutil.copy(source, tmp_path / "config.json")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 40)) as pilot:
        await home(pilot)
        await pilot.press("l")
        await wait_until(pilot, lambda: isinstance(app.screen, PathPrompt) and app.screen.is_mounted)
        await pilot.press(*"config.json", "enter")
        builder = await builder_up(pilot)
        assert builder.task == "statistics"
        assert row(builder, "dump_path").query_one(Input).value == "./dump_path"
        assert row(builder, "level").query_one(Select).value == "L1"
        assert row(builder, "statistics.data_mode").query_one(Input).value == "all"
        notes = str(builder.query_one("#issues").render())
        assert "extra_info" in notes  # msprobe keys we do not use, said once (its acc_check section is a task of ours now)
        assert builder.path is None  # saving asks for a new name: the msprobe file is not overwritten
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, PathPrompt) and app.screen.is_mounted)
        assert app.screen.query_one(Input).value == "config_probe.json"
        await pilot.press("enter")
        await wait_until(pilot, lambda: (tmp_path / "config_probe.json").is_file())
    assert json.loads((tmp_path / "config.json").read_text()) == json.loads(source.read_text())
    job = schemas.load_config(tmp_path / "config_probe.json")
    assert job.dump_path == "./dump_path"


@pilot_test
async def test_a_sample_config_is_a_template(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 40)) as pilot:
        await new_config(pilot)
        start = app.screen
        ids = [start.query_one("#start-options").get_option_at_index(i).id
               for i in range(start.query_one("#start-options").option_count)]
        index = next(i for i, oid in enumerate(ids) if oid and oid.endswith("sample_configs/tensor.json"))
        start.query_one("#start-options").highlighted = index
        await pilot.press("enter")
        builder = await builder_up(pilot)
        assert builder.task == "tensor"
        assert builder.path is None and builder.validation.ok


@pilot_test
async def test_a_config_without_a_target_is_not_run(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 40)) as pilot:
        await home(pilot)
        app.open_builder({"task": "statistics"}, path=None)
        builder = await builder_up(pilot)
        assert builder.validation.ok
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: any("a run needs a target" in str(n.message) for n in app._notifications))
        assert app.screen is builder


# ---- running the real `probe-tui --run` on the demo -------------------------------------------------------------

async def new_config(pilot):
    """From the home screen, ``n``: the start screen (a task and a starting point), mounted."""
    await home(pilot)
    await pilot.press("n")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, StartScreen) and pilot.app.screen.is_mounted)


async def _build_and_run(pilot, app, tmp_path, steps):
    """Build a statistics config of the demo for ``steps`` steps, save it, run it: the run screen."""
    from probe_tui.app.screens.run import RunScreen

    await new_config(pilot)
    await pilot.press("enter")  # statistics starter: the tiny demo
    builder = await builder_up(pilot)
    await type_into(pilot, builder, "target.demo.steps", str(steps))
    assert builder.validation.ok
    await pilot.press("ctrl+r")  # asks where to save first
    await wait_until(pilot, lambda: isinstance(app.screen, PathPrompt) and app.screen.is_mounted)
    await pilot.press("enter")
    await wait_until(pilot, lambda: app.screen is not builder and not isinstance(app.screen, PathPrompt))
    assert isinstance(app.screen, RunScreen)
    return app.screen


@pilot_test
async def test_run_a_config_on_the_demo_see_it_finish_and_find_the_dump(tmp_path):
    from probe_tui.app.screens.home import HomeScreen
    from probe_tui.app.screens.run import RunScreen
    from probe_tui.app.screens.summary import RunSummaryScreen

    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 40)) as pilot:
        run = await _build_and_run(pilot, app, tmp_path, 3)
        assert run.command[1:4] == ["-m", "probe_tui", "--run"]
        await wait_until(pilot, lambda: run.finished_at is not None, timeout=120)
        assert run.status == "finished" and run.exit_code == 0, run.child.log_path.read_text()
        assert run.step == 3 and run.total_steps == 3
        assert str(run.query_one("#info-step").render()) == "3 / 3"
        dump = str(run.query_one("#info-dump").render())
        assert dump.startswith("probe_dump/") and (tmp_path / dump / "run.json").is_file()
        # what the statistics engine wrote is shown, and is there
        assert run.records == run.summary["records"] > 0 and run.bytes == run.summary["capture"]["bytes"]
        assert f"{run.records:,} records" in str(run.query_one("#info-written").render())
        assert any((tmp_path / dump / "rank0").iterdir())
        await pilot.press("o")  # the dump browser on what the run wrote
        browser = await wait_until(pilot, lambda: isinstance(app.screen, DumpScreen) and app.screen)
        await wait_until(pilot, lambda: browser.index is not None)
        assert browser.index.steps() == [0, 1, 2] and browser.index.origin == "probe-tui"
        await pilot.press("i")  # its files and run.json
        summary = await wait_until(pilot, lambda: isinstance(app.screen, RunSummaryScreen) and app.screen)
        await wait_until(pilot, lambda: summary.summary is not None)
        assert summary.summary.run["status"] == "finished" and summary.summary.run["task"] == "statistics"
        for back_to in (DumpScreen, RunScreen, BuilderScreen, HomeScreen):  # one escape at a time
            await pilot.press("escape")
            await wait_until(pilot, lambda t=back_to: isinstance(app.screen, t))
        home = app.screen
        await wait_until(pilot, lambda: home.runs and home.configs)
        assert [r["folder"] for r in home.runs] == [dump]
        assert home.runs[0]["status"] == "finished" and home.runs[0]["task"] == "statistics"
        assert [c.path.name for c in home.configs] == ["statistics.json"]


@pilot_test
async def test_stop_a_demo_run_cleanly(tmp_path):

    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 40)) as pilot:
        run = await _build_and_run(pilot, app, tmp_path, 5000)
        await wait_until(pilot, lambda: run.step >= 2, timeout=120)
        await pilot.press("s")
        await wait_until(pilot, lambda: run.finished_at is not None, timeout=60)
        assert run.status == "stopped" and run.exit_code == 130
        assert 2 <= run.step < 5000
    meta = json.loads((tmp_path / run.run_dir / "run.json").read_text())
    assert meta["status"] == "stopped"


@pilot_test
async def test_home_lists_runs_and_msprobe_dumps_newest_first_and_opens_them(tmp_path):
    from probe_tui.app.screens.home import HomeScreen
    from probe_tui.app.screens.summary import RunSummaryScreen

    shutil.copytree(DATA / "msprobe" / "real" / "stats_md5_mix", tmp_path / "msprobe_dump")
    os.utime(tmp_path / "msprobe_dump", (1000, 1000))  # older than the run below
    run = tmp_path / "probe_dump" / "20260105-101500-a1b2c3"
    (run / "rank0").mkdir(parents=True)
    (run / "rank0" / "dump.h5").write_bytes(b"\0" * 5000)
    (run / "run.json").write_text(json.dumps({"run_id": run.name, "task": "tensor", "framework": "pytorch",
                                              "status": "finished", "started": "2026-01-05T10:15:00+00:00",
                                              "started_unix": 1767608100.0, "steps": 4}))
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        home = app.screen
        assert isinstance(home, HomeScreen)
        await wait_until(pilot, lambda: home.scanned)
        rows = [(r["folder"], r["task"], r["status"], r["steps"], r["ranks"]) for r in home.runs]
        assert rows == [("probe_dump/20260105-101500-a1b2c3", "tensor", "finished", "4", "1"),
                        ("msprobe_dump", "statistics", "msprobe dump", "1", "1")]
        await pilot.press("down", "enter")  # the msprobe dump opens in the dump browser
        browser = await wait_until(pilot, lambda: isinstance(app.screen, DumpScreen) and app.screen)
        await wait_until(pilot, lambda: browser.index is not None)
        assert browser.index.origin == "msprobe"
        await pilot.press("i")
        summary = await wait_until(pilot, lambda: isinstance(app.screen, RunSummaryScreen) and app.screen)
        await wait_until(pilot, lambda: summary.summary is not None)
        assert "step0/proc15250/dump.json" in [name for name, _ in summary.summary.files]
