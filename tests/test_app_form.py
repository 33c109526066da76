"""The generated config form, on pydantic models of our own that use every feature the schemas use:
nested models, discriminated unions, Literal/enum, bool, bounded int/float, lists of scalars and of models,
optional fields and sections, dicts, descriptions and advanced fields."""

import asyncio
import enum
import functools
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Dict, List, Literal, Optional, Union

import pytest
from pydantic import BaseModel, Field, ValidationError
from textual.app import App
from textual.containers import VerticalScroll
from textual.widgets import Button, Collapsible, Input, Select, Switch

from probe_tui.app.config_backend import Issue, LoadedConfig, Validation, _read_json_object
from probe_tui.app.form import spec as S
from probe_tui.app.form import values as V
from probe_tui.app.form.fields import FieldRow
from probe_tui.app.form.model_form import ModelForm, all_rows, place_issues
from tests.app_pilot import wait_until


def pilot_test(coro_fn):
    """Run an async pilot test with plain asyncio (no pytest async plugin needed)."""

    @functools.wraps(coro_fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(coro_fn(*args, **kwargs))

    return wrapper


class Color(str, enum.Enum):
    red = "red"
    blue = "blue"


class Fault(BaseModel):
    layer: int = Field(0, ge=0, description="Which layer.")
    from_step: int = Field(0, ge=0, description="First step it applies to.")


class DemoTarget(BaseModel):
    kind: Literal["demo"] = "demo"
    steps: int = Field(5, ge=1, le=1000, description="Training steps.")
    dtype: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="Autocast dtype.")
    fault: Optional[Fault] = Field(None, description="Inject a fault.")


class ScriptTarget(BaseModel):
    kind: Literal["script"] = "script"
    script: str = Field(..., description="Path of the training script.")
    args: List[str] = Field(default_factory=list, description="Its arguments.")


class Rule(BaseModel):
    name: str = Field(..., description="Rule name.")
    threshold: float = Field(0.5, gt=0, description="Alert above this.")


class Section(BaseModel):
    scope: List[str] = Field(default_factory=list, description="Module or API names.")
    summary_mode: Literal["statistics", "md5"] = Field("statistics", description="What each record keeps.")
    color: Color = Field(Color.red, description="An enum field.")
    rules: List[Rule] = Field(default_factory=list, description="Alert rules.")
    env: Dict[str, str] = Field(default_factory=dict, description="Extra environment.",
                                json_schema_extra={"advanced": True})


class ToyJob(BaseModel):
    """A toy statistics job."""

    task: Literal["toy"] = "toy"
    dump_path: str = Field("./probe_dump", description="Where runs are written.")
    step: List[Union[int, str]] = Field(default_factory=list, description="Steps to capture; empty = all.")
    level: Literal["L0", "L1", "mix"] = Field("L1", description="Capture level.")
    async_dump: bool = Field(False, description="Write asynchronously.")
    scale: float = Field(1.0, ge=0.0, le=10.0, description="A bounded float.")
    seed: Optional[int] = Field(None, description="Random seed.", json_schema_extra={"advanced": True})
    target: Union[DemoTarget, ScriptTarget] = Field(default_factory=DemoTarget, discriminator="kind",
                                                    description="What to run.")
    toy: Section = Field(default_factory=Section, description="The task section.")


class OtherJob(BaseModel):
    """Another task sharing dump_path."""

    task: Literal["other"] = "other"
    dump_path: str = Field("./probe_dump", description="Where runs are written.")
    other: Dict[str, int] = Field(default_factory=dict, description="Free-form section.")


def _path_of(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


class ToyBackend:
    """The builder's backend over the toy models (pydantic's own messages)."""

    models = {"toy": ToyJob, "other": OtherJob}

    def tasks(self):
        return dict(self.models)

    def task_doc(self, task):
        return (self.models[task].__doc__ or "").strip()

    def starter(self, task):
        return {"task": task}

    def validate(self, data):
        model = self.models.get(data.get("task"), ToyJob)
        try:
            return Validation(model.model_validate(data))
        except ValidationError as exc:
            issues = []
            for err in exc.errors():
                loc = err["loc"]
                if len(loc) > 1 and loc[0] == "target" and loc[1] in ("demo", "script"):
                    loc = ("target",) + tuple(loc[2:])  # drop pydantic's union tag
                issues.append(Issue(_path_of(loc), err["msg"]))
            return Validation(None, issues)

    def normalise(self, job):
        return job.model_dump(mode="json")

    def read_file(self, path):
        data = _read_json_object(Path(path))
        result = self.validate(data)
        return LoadedConfig(Path(path), self.normalise(result.job) if result.ok else data, result)


# ---- introspection ---------------------------------------------------------------------------------------------

def _specs(model):
    return {s.name: s for s in S.describe_model(model)}


def test_each_field_gets_the_control_its_type_calls_for():
    specs = _specs(ToyJob)
    assert specs["task"].kind == S.CONST and specs["task"].choices == ("toy",)
    assert specs["dump_path"].kind == S.SCALAR and specs["dump_path"].scalar_types == (str,)
    assert specs["step"].kind == S.SCALAR_LIST and specs["step"].scalar_types == (int, str)
    assert specs["level"].kind == S.CHOICE and specs["level"].choices == ("L0", "L1", "mix")
    assert specs["async_dump"].kind == S.BOOL
    assert specs["scale"].kind == S.SCALAR and specs["scale"].bounds == "≥ 0.0, ≤ 10.0"
    assert specs["seed"].optional and specs["seed"].advanced and specs["seed"].scalar_types == (int,)
    assert specs["target"].kind == S.UNION and list(specs["target"].variants) == ["demo", "script"]
    assert specs["target"].discriminator == "kind"
    assert specs["toy"].kind == S.MODEL and specs["toy"].model is Section
    section = _specs(Section)
    assert section["color"].kind == S.CHOICE and section["color"].choices == ("red", "blue")
    assert section["rules"].kind == S.MODEL_LIST and section["rules"].model is Rule
    assert section["env"].kind == S.JSON and section["env"].advanced
    assert _specs(DemoTarget)["fault"].kind == S.MODEL and _specs(DemoTarget)["fault"].optional


def test_field_docs_defaults_and_required_flags_are_read_from_the_model():
    specs = _specs(ToyJob)
    assert specs["dump_path"].description == "Where runs are written."
    assert specs["dump_path"].default_text() == "./probe_dump"
    assert specs["step"].default_text() == "empty"
    assert specs["async_dump"].default_text() == "false"
    assert specs["target"].default_text() == ""  # a section shows its fields' defaults, not a dict
    assert _specs(Rule)["name"].required and not _specs(Rule)["threshold"].required


def test_aliased_fields_use_their_alias_as_the_key():
    class WithAlias(BaseModel):
        list_: List[str] = Field(default_factory=list, alias="list", description="API names.")

    assert [s.name for s in S.describe_model(WithAlias)] == ["list"]


# ---- text <-> values --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, types, expected", [
    ("12", (int,), 12),
    ("1e-3", (float,), 1e-3),
    ("2-3", (int, str), "2-3"),
    ("true", (bool, str), True),
    ("abc", (int,), "abc"),  # left as text: the schema reports it at the field
    (" ./x ", (str,), "./x"),
])
def test_scalar_text_becomes_the_first_type_it_fits(text, types, expected):
    assert V.parse_scalar(text, types) == expected


def test_lists_are_comma_separated_or_json():
    assert V.parse_list("0, 2-3,", (int, str)) == [0, "2-3"]
    assert V.parse_list('["a,b", "c"]', (str,)) == ["a,b", "c"]
    assert V.format_list([0, "2-3"]) == "0, 2-3"
    assert V.format_list(["a,b"]) == '["a,b"]'
    with pytest.raises(ValueError, match="not valid JSON"):
        V.parse_list("[1,", (int,))


def test_error_paths_split_into_form_path_parts():
    assert V.split_path("toy.rules[1].name") == ("toy", "rules", "[1]", "name")
    assert V.split_path("step[2]") == ("step", "[2]")


# ---- the form, driven with Textual's pilot ---------------------------------------------------------------------

class FormApp(App):
    CSS_PATH = str(Path(__file__).resolve().parents[1] / "probe_tui" / "app" / "form" / "form.tcss")

    def __init__(self, model, data):
        super().__init__()
        self.model, self.data = model, data

    def compose(self):
        with VerticalScroll():
            yield ModelForm(self.model, self.data, id="form")


def _row(app, path) -> FieldRow:
    return next(r for r in all_rows(app.query_one("#form")) if r.path == path)


@pilot_test
async def test_a_form_collects_only_what_is_set_so_defaults_apply():
    app = FormApp(ToyJob, {"task": "toy"})
    async with app.run_test(size=(100, 60)) as pilot:
        form = app.query_one("#form", ModelForm)
        assert form.collect() == {"task": "toy", "target": {"kind": "demo"}, "toy": {}}
        _row(app, "dump_path").query_one(Input).value = "./elsewhere"
        _row(app, "step").query_one(Input).value = "0, 2-3"
        _row(app, "async_dump").query_one(Switch).value = True
        _row(app, "level").query_one(Select).value = "mix"
        _row(app, "toy.color").query_one(Select).value = "blue"
        await wait_until(pilot, lambda: form.collect().get("toy") == {"color": "blue"})
        data = form.collect()
        assert data["dump_path"] == "./elsewhere"
        assert data["step"] == [0, "2-3"]
        assert data["async_dump"] is True and data["level"] == "mix"
        assert data["toy"] == {"color": "blue"}
        ToyJob.model_validate(data)


@pilot_test
async def test_a_loaded_config_fills_the_form_and_round_trips():
    data = {"task": "toy", "dump_path": "/d", "step": [1, "3-4"], "level": "L0", "async_dump": True,
            "scale": 2.5, "seed": 7, "target": {"kind": "script", "script": "train.py", "args": ["--lr", "3"]},
            "toy": {"scope": ["a", "b"], "rules": [{"name": "spike", "threshold": 2.0}], "env": {"X": "1"}},
            "comment": "kept as is"}
    app = FormApp(ToyJob, data)
    async with app.run_test(size=(100, 80)):
        assert _row(app, "target").query_one(Select).value == "script"
        assert _row(app, "toy.rules[0].name").query_one(Input).value == "spike"
        assert app.query_one("#form", ModelForm).collect() == data


@pilot_test
async def test_advanced_fields_are_folded_away():
    app = FormApp(ToyJob, {"task": "toy", "seed": 3})
    async with app.run_test(size=(100, 60)) as pilot:
        form = app.query_one("#form", ModelForm)
        seed = _row(app, "seed")
        assert isinstance(form.fold, Collapsible) and form.fold.collapsed
        assert "Advanced (1)" in str(form.fold.title)
        assert not seed.is_mounted  # folded rows are built when first unfolded
        assert form.collect()["seed"] == 3  # and still count
        assert not _row(app, "dump_path").has_class("advanced")
        await pilot.press("tab")
        form.fold.collapsed = False
        await wait_until(pilot, lambda: seed.is_mounted)
        assert seed.parent.parent is form.fold
        assert seed.control.value == "3" and form.collect()["seed"] == 3


@pilot_test
async def test_an_optional_section_is_switched_on_and_off():
    app = FormApp(ToyJob, {"task": "toy"})
    async with app.run_test(size=(100, 60)) as pilot:
        form = app.query_one("#form", ModelForm)
        fault = _row(app, "target.fault")
        assert "fault" not in form.collect()["target"]
        fault.query_one(Switch).value = True
        # the section's fields are mounted when it is first set
        await wait_until(pilot, lambda: form.collect()["target"].get("fault") == {}
                         and _row(app, "target.fault.layer").ready())
        _row(app, "target.fault.layer").query_one(Input).value = "2"
        await wait_until(pilot, lambda: form.collect()["target"].get("fault") == {"layer": 2})
        fault.query_one(Switch).value = False
        await wait_until(pilot, lambda: "fault" not in form.collect()["target"])


@pilot_test
async def test_switching_a_union_variant_shows_that_variants_fields():
    app = FormApp(ToyJob, {"task": "toy"})
    async with app.run_test(size=(100, 60)) as pilot:
        target = _row(app, "target")
        target.query_one(Select).value = "script"
        await wait_until(pilot, lambda: any(r.path == "target.script" and r.query(Input)  # the row, then its field
                                            for r in all_rows(app.query_one("#form"))))
        paths = [r.path for r in all_rows(app.query_one("#form"))]
        assert "target.steps" not in paths
        _row(app, "target.script").query_one(Input).value = "train.py"
        await wait_until(pilot, lambda: app.query_one("#form", ModelForm).collect()["target"] ==
                         {"kind": "script", "script": "train.py"})


@pilot_test
async def test_list_of_sections_adds_and_removes_items():
    app = FormApp(ToyJob, {"task": "toy", "toy": {"rules": [{"name": "a"}, {"name": "b"}]}})
    async with app.run_test(size=(100, 80)) as pilot:
        form = app.query_one("#form", ModelForm)
        rules = _row(app, "toy.rules")
        rules.query_one(".list-add", Button).press()
        await wait_until(pilot, lambda: len(form.collect()["toy"]["rules"]) == 3)
        await wait_until(pilot, lambda: any(r.path == "toy.rules[2].name" and r.query(Input) for r in all_rows(form)))
        _row(app, "toy.rules[2].name").query_one(Input).value = "c"
        await wait_until(pilot, lambda: form.collect()["toy"]["rules"][2] == {"name": "c"})
        first_remove = rules.query(".list-remove").first(Button)
        first_remove.press()
        await wait_until(pilot, lambda: form.collect()["toy"]["rules"] == [{"name": "b"}, {"name": "c"}])


@pilot_test
async def test_issues_are_placed_at_their_field_and_cleared():
    app = FormApp(ToyJob, {"task": "toy", "toy": {"rules": [{"name": "a"}]}})
    async with app.run_test(size=(100, 80)) as pilot:
        rows = all_rows(app.query_one("#form"))
        unplaced = place_issues(rows, [("scale", "must be ≤ 10"), ("toy.rules[0].threshold", "must be > 0"),
                                       ("step[1]", "bad range"), ("", "whole config"),
                                       ("seed", "not an int")])
        assert unplaced == [("", "whole config")]
        await wait_until(pilot, lambda: _row(app, "scale").has_class("-has-error"))
        assert _row(app, "scale").error == "must be ≤ 10" and _row(app, "scale").has_class("-has-error")
        assert _row(app, "toy.rules[0].threshold").error == "must be > 0"
        assert _row(app, "step").error == "[1]: bad range"
        await wait_until(pilot, lambda: _row(app, "seed").is_mounted)  # the fold is built when unfolded
        seed_fold = _row(app, "seed").parent.parent
        assert not seed_fold.collapsed  # an error in an advanced field unfolds it
        place_issues(rows, [])
        await wait_until(pilot, lambda: not _row(app, "scale").has_class("-has-error"))
        assert not any(r.error for r in rows)


@pilot_test
async def test_text_that_is_not_valid_json_is_an_error_at_its_field():
    app = FormApp(ToyJob, {"task": "toy"})
    async with app.run_test(size=(100, 60)) as pilot:
        env = _row(app, "toy.env")
        await env.owner_form.unfold_advanced()
        await pilot.pause()
        env.query_one(Input).value = '{"X": '
        await wait_until(pilot, lambda: env.local_error and "not valid JSON" in env.local_error)
        env.query_one(Input).value = '{"X": "1"}'
        await wait_until(pilot, lambda: env.local_error is None)
        assert app.query_one("#form", ModelForm).collect()["toy"]["env"] == {"X": "1"}


# ---- the builder screen over the toy models ---------------------------------------------------------------------

async def _open_builder(app, pilot, data, path=None):
    from probe_tui.app.screens.builder import BuilderScreen
    from probe_tui.app.screens.home import HomeScreen

    await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))
    app.open_builder(data, path=path)
    await wait_until(pilot, lambda: isinstance(app.screen, BuilderScreen) and app.screen.is_mounted
                     and bool(app.screen.query("#form")) and not app.screen.building)
    await pilot.pause()
    return app.screen


async def _settle(pilot):
    from probe_tui.app.screens.builder import VALIDATE_DELAY_S

    await pilot.pause(VALIDATE_DELAY_S + 0.1)


def _toy_app(tmp_path):
    from probe_tui.app.app import ProbeApp

    return ProbeApp(tmp_path, backend=ToyBackend(), root_label="~/exp")


@asynccontextmanager
async def _toy_builder(tmp_path, data):
    """The toy app with the builder open on ``data``: (app, pilot, builder)."""
    app = _toy_app(tmp_path)
    async with app.run_test(size=(100, 50)) as pilot:
        yield app, pilot, await _open_builder(app, pilot, data)


@pilot_test
async def test_builder_shows_an_error_at_its_field_and_clears_it(tmp_path):
    async with _toy_builder(tmp_path, {"task": "toy"}) as (app, pilot, builder):
        assert builder.validation.ok
        steps = _row(builder, "target.steps")
        steps.query_one(Input).focus()
        await pilot.press("0")
        await _settle(pilot)
        assert not builder.validation.ok
        assert "greater than or equal to 1" in steps.error
        assert "1 error" in str(builder.query_one("#validity").render())
        await pilot.press("backspace", "3")
        await _settle(pilot)
        assert builder.validation.ok and steps.error is None
        assert "valid" in str(builder.query_one("#validity").render())


@pilot_test
async def test_builder_saves_normalised_json_and_loads_it_back(tmp_path):
    import json

    from probe_tui.app.screens.path_prompt import PathPrompt

    async with _toy_builder(tmp_path, {"task": "toy"}) as (app, pilot, builder):
        _row(builder, "dump_path").query_one(Input).value = "./dumps"
        await _settle(pilot)
        assert builder.dirty
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, PathPrompt) and app.screen.is_mounted)
        assert app.screen.query_one(Input).value == "toy.json"
        await pilot.press("enter")
        await wait_until(pilot, lambda: (tmp_path / "toy.json").is_file() and not builder.dirty)
        saved = json.loads((tmp_path / "toy.json").read_text())
        assert saved == ToyJob(dump_path="./dumps").model_dump(mode="json")
        assert builder.path == tmp_path / "toy.json" and not builder.dirty
        # Change it on disk, then load it into the form.
        saved["level"] = "mix"
        (tmp_path / "toy.json").write_text(json.dumps(saved))
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, PathPrompt) and app.screen.is_mounted)
        await pilot.press(*"toy.json", "enter")
        await wait_until(pilot, lambda: _row(builder, "level").query_one(Select).value == "mix")
        assert not builder.dirty


@pilot_test
async def test_changing_the_task_keeps_shared_fields(tmp_path):
    async with _toy_builder(tmp_path, {"task": "toy", "dump_path": "/kept"}) as (app, pilot, builder):
        await pilot.press("ctrl+t")
        assert builder.focused is builder.query_one("#task")
        builder.query_one("#task", Select).value = "other"
        await wait_until(pilot, lambda: builder.form.model is OtherJob)
        assert builder.collect() == {"task": "other", "dump_path": "/kept"}


@pilot_test
async def test_leaving_with_unsaved_changes_asks_first(tmp_path):
    from probe_tui.app.screens.builder import BuilderScreen
    from probe_tui.app.screens.confirm import ConfirmScreen

    async with _toy_builder(tmp_path, {"task": "toy"}) as (app, pilot, builder):
        _row(builder, "dump_path").query_one(Input).value = "./x"
        await _settle(pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("escape")  # keep editing
        await wait_until(pilot, lambda: isinstance(app.screen, BuilderScreen))
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.is_mounted)
        app.screen.query_one("#answer-discard", Button).press()
        await wait_until(pilot, lambda: not isinstance(app.screen, (BuilderScreen, ConfirmScreen)))


@pilot_test
async def test_next_error_moves_to_each_field_with_an_error(tmp_path):
    data = {"task": "toy", "scale": 50, "target": {"kind": "demo", "steps": 0}}
    async with _toy_builder(tmp_path, data) as (app, pilot, builder):
        assert len(builder.validation.issues) == 2
        await pilot.press("ctrl+n")
        assert builder.focused in _row(builder, "scale").query(Input)
        await pilot.press("ctrl+n")
        assert builder.focused in _row(builder, "target.steps").query(Input)
        await pilot.press("ctrl+n")
        assert builder.focused in _row(builder, "scale").query(Input)
        await pilot.press("ctrl+r")  # not runnable: stays, says why
        await pilot.pause()
        assert app.screen is builder
