"""The app: a home screen of runs and configs, the config builder, the run screen and the run summary.

Keys come from one registry (``probe_tui.app.actions``) that also feeds the footer, the help screen and the
command palette. Errors are shown as notifications; nothing a user does (a bad file, a crashing run) ends the app.
"""

import gc
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from textual import events, on, work
from textual.actions import SkipAction
from textual.app import App, SystemCommand
from textual.message import Message
from textual.screen import Screen
from textual.theme import Theme
from textual.timer import Timer
from textual.widgets import DataTable
from textual.worker import get_current_worker

from probe_tui.app.actions import SCOPE_TITLES, bindings_for, keymap_path, load_keymap
from probe_tui.app.child import ChildRun
from probe_tui.app.commands import ActionCommands
from probe_tui.app.config_backend import SchemaBackend, sample_configs
from probe_tui.app.idle_gc import CHECK_S, QUIET_S, IdleCollector
from probe_tui.app.idle_gc import THRESHOLDS as GC_THRESHOLDS  # noqa: N811
from probe_tui.app.openers import detect_kind, factory_for
from probe_tui.app.screens.base import ResultScreen, open_read_first


def resolve_start(path: Optional[Union[str, Path]]) -> Tuple[Path, Optional[Path]]:
    """``(root, start)`` for ``probe-tui [open PATH]``: the folder home lists, and what opens on top of it (a
    run, rank or step folder, a dump.json, a metrics.h5, a compare result, a config file; ``openers.start_kind``).
    A folder of runs or an empty folder is listed (start None). Raises FileNotFoundError naming a path that does
    not exist."""
    from probe_tui.app.openers import start_kind

    if path is None:
        return Path.cwd(), None
    target = Path(path).expanduser()
    if not target.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    target = target.resolve()
    if target.is_file() or start_kind(target) is not None:
        return target.parent, target
    return target, None


def home_label(root: Path) -> str:
    """The folder as a person reads it: ``~/exp`` under the home folder."""
    home = Path.home()
    try:
        return "~/" + str(root.relative_to(home)) if root != home else "~"
    except ValueError:
        return str(root)


SCREEN_CSS = sorted("screens/" + path.name for path in (Path(__file__).parent / "screens").glob("*.tcss"))
"""Every screen's stylesheet, read when the app starts. Textual reads a screen's ``CSS_PATH`` the first time the
screen opens, then parses every stylesheet of the app again and restyles every widget on screen: ~100 ms of the
key that opened the view (twice that on a loaded machine). The rules name their screen (``CompareScreen #...``),
so reading them early changes no style."""


class ProbeApp(App):
    """The probe-tui terminal app, on the folder ``root``."""

    TITLE = "probe-tui"
    CSS_PATH = ["app.tcss", "form/form.tcss", *SCREEN_CSS]
    BINDINGS = bindings_for("app")
    COMMANDS = {ActionCommands}
    """One provider: the app's actions, then Textual's system commands (``get_system_commands``)."""

    def __init__(self, root: Union[str, Path], *, start: Optional[Path] = None, backend: Any = None,
                 root_label: Optional[str] = None, run_command: Optional[Sequence[str]] = None,
                 run_env: Optional[Dict[str, str]] = None, workdir: Optional[Union[str, Path]] = None) -> None:
        """``run_command`` replaces ``python -m probe_tui --run`` (its config path is appended), for tests.
        ``workdir``: the folder runs start in (their relative ``dump_path`` lands there); default ``root``."""
        super().__init__()
        self.root = Path(root).resolve()
        self.workdir = Path(workdir).resolve() if workdir is not None else self.root
        self.start_path = start
        self.backend = backend or SchemaBackend()
        self.root_label = root_label or home_label(self.root)
        self.run_command = list(run_command) if run_command else None
        self.run_env = run_env
        self.children_started: List[ChildRun] = []
        self.user_keymap: Dict[str, str] = {}
        self.ranks_chosen: Dict[str, Optional[int]] = {}
        """The rank each run's views show (``probe_tui.app.ranks``): run folder -> rank, None for every rank."""
        self.drawn_theme = ""
        """The theme the text on screen was coloured for (``probe_tui.app.recolour``)."""
        self.startup_frozen = False
        """:meth:`freeze_startup` done (undone as the app ends)."""
        self.idle_gc = IdleCollector()
        """Collects the collector's middle generation once the user stops typing (``probe_tui.app.idle_gc``)."""
        self._idle_gc_timer: Optional[Timer] = None

    def on_mount(self) -> None:
        from probe_tui.app.screens.home import HomeScreen
        from probe_tui.app.themes import apply_terminal_theme

        gc.set_threshold(*GC_THRESHOLDS)  # (probe_tui.app.idle_gc: the quiet collects the rest)

        apply_terminal_theme(self)
        self.drawn_theme = self.theme
        self.theme_changed_signal.subscribe(self, self._theme_switched)
        self.user_keymap, problems = load_keymap(keymap_path())
        if self.user_keymap:
            self.set_keymap(self.user_keymap)
        for problem in problems:
            self.notify(problem, severity="warning", title="Keymap")
        self.push_screen(HomeScreen())
        if self.start_path is not None:
            self.call_later(self.open_path, self.start_path)

    def _theme_switched(self, theme: Theme) -> None:
        """Text already on screen takes the new theme's role colours (not only what is drawn from now on)."""
        from probe_tui.app.recolour import recolour_app

        old, self.drawn_theme = self.drawn_theme, theme.name
        recolour_app(self, old, theme.name)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent) and not event.is_forwarded and not isinstance(event, events.MouseMove):
            self._input_seen()  # (a mouse moving over the app is not a key: it re-arms no timer)
        await super().on_event(event)

    def _input_seen(self) -> None:
        """A key or a click: the garbage collector waits until the user has been quiet for ``QUIET_S``."""
        self.idle_gc.input_seen()
        if self._idle_gc_timer is not None:
            self._idle_gc_timer.stop()
        self._idle_gc_timer = self.set_timer(QUIET_S, self._collect_while_quiet, name="idle-gc")

    def _collect_while_quiet(self) -> None:
        self._idle_gc_timer = None
        if self.idle_gc.waits_for_workers(any(worker.is_running for worker in self.workers)):
            self._idle_gc_timer = self.set_timer(CHECK_S, self._collect_while_quiet, name="idle-gc")
            return
        self.idle_gc.tick()
        wait = self.idle_gc.next_tick()  # a full collection pending: it waits for a longer quiet
        if wait is not None:
            self._idle_gc_timer = self.set_timer(wait, self._collect_while_quiet, name="idle-gc")

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.width < 81, "narrow")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's palette commands the app keeps: its own quit and its help screen (esc closes it) replace
        Textual's "Quit" and "Keys" panel (which esc did not close)."""
        for command in super().get_system_commands(screen):
            if command.title == "Keys":
                yield SystemCommand("Keys", "Every key of this screen and of the app (the help screen)",
                                    self.action_help)
            elif command.title != "Quit":
                yield command

    def action_table_edge(self, edge: str) -> None:
        """Home/End in a row table: the first or last row (Textual's table scrolls sideways); elsewhere the key
        goes on to the focused widget."""
        table = self.focused
        if not isinstance(table, DataTable) or table.cursor_type != "row" or not table.row_count:
            raise SkipAction()
        table.move_cursor(row=0 if edge == "first" else table.row_count - 1, scroll=True)

    # ---- navigation ---------------------------------------------------------------------------------------
    def action_help(self) -> None:
        from probe_tui.app.screens.help import HelpScreen

        screen = self.screen
        if isinstance(screen, HelpScreen):
            screen.dismiss()
            return
        scope = getattr(screen, "SCOPE", "app")
        title = "Home" if scope == "home" else SCOPE_TITLES.get(scope, "probe-tui") if scope != "app" else "probe-tui"
        self.push_screen(HelpScreen(scope, title))

    def action_go_home(self) -> None:
        from probe_tui.app.screens.home import HomeScreen

        while len(self.screen_stack) > 2 and not isinstance(self.screen, HomeScreen):
            self.pop_screen()

    class ViewDetected(Message):
        """What :meth:`open_path`'s detection found: the kind of view for ``path`` (None: no view knows it), or
        the error that stopped it."""

        def __init__(self, path: Path, kind: Optional[str], error: str = "", list_folder: bool = False) -> None:
            super().__init__()
            self.path = path
            self.kind = kind
            self.error = error
            self.list_folder = list_folder
            """A folder no view claims becomes the folder home lists (the "open a path" action)."""

    def open_path(self, path: Union[str, Path], kind: Optional[str] = None, list_folder: bool = False) -> None:
        """Open a folder in the view registered for it: the one way every screen opens a path
        (``probe_tui.app.openers``). With ``kind`` ("run" for the run summary, "dump", "monitor"...) that view
        opens at once; without, the detectors (which read files) run on a worker thread and the view opens when
        :class:`ViewDetected` arrives."""
        path = Path(path)
        if kind is not None:
            self._push_view(path, kind)
            return
        if not path.exists():
            self.notify(f"{path}: no such file or folder", severity="error")
            return
        self._detect_view(path, list_folder)

    @work(thread=True, exclusive=True, group="open-path", exit_on_error=False)
    def _detect_view(self, path: Path, list_folder: bool = False) -> None:
        try:
            message = self.ViewDetected(path, detect_kind(path), list_folder=list_folder)
        except Exception as exc:  # a detector that fails on a strange folder is a notification
            message = self.ViewDetected(path, None, f"{path}: cannot open: {exc}")
        if not get_current_worker().is_cancelled:  # a later open_path wins
            self.post_message(message)

    @on(ViewDetected)
    def _view_detected(self, message: "ProbeApp.ViewDetected") -> None:
        if message.error:
            self.notify(message.error, severity="error")
        elif message.list_folder and message.kind == "folder":
            self.set_root(message.path)
        elif message.kind is None and message.path.is_file():
            self.load_into_builder(message.path)  # a config file (ours or msprobe's); the builder names a bad one
        elif message.kind is None:
            self.notify(f"{message.path}: no view knows this kind of file", severity="warning")
        else:
            self._push_view(message.path, message.kind)

    def _push_view(self, path: Path, kind: str) -> None:
        factory = factory_for(kind)
        if factory is None:
            self.notify(f"{path}: no view of kind {kind!r}", severity="error")
            return
        try:
            screen = factory(path)
        except Exception as exc:
            self.notify(f"{path}: cannot open: {exc}", severity="error")
            return
        self._push_view_screen(screen)

    def _push_view_screen(self, screen: Screen) -> None:
        if isinstance(screen, ResultScreen):
            open_read_first(self, screen)  # its first frame holds its result
        else:
            self.push_screen(screen)

    def open_prefetched(self, screen: Screen, loaded: Optional[ResultScreen.Loaded] = None) -> None:
        """Push a view read ahead (``probe_tui.app.view_prefetch``): built, its result (if it shows one) read."""
        if isinstance(screen, ResultScreen) and loaded is not None:
            screen.preloaded = loaded
            screen.reading_elsewhere = False
        self.push_screen(screen)

    def action_open_any(self) -> None:
        """Ask for a path and open it in its view: a run, rank or step folder, a dump.json, a metrics.h5, a compare
        result, a config file; a folder of runs becomes the folder home lists."""
        from probe_tui.app.screens.path_prompt import PathPrompt

        def chosen(path: Optional[Path]) -> None:
            if path is not None:
                self.open_any(path)

        self.push_screen(PathPrompt("Open a run, dump, result or config (a folder of runs: list it)", self.root,
                                    folders=True), chosen)

    def open_any(self, path: Path) -> None:
        from probe_tui.app.openers import holds_runs

        path = Path(path).expanduser().resolve()
        if path.is_dir() and holds_runs(path):
            self.set_root(path)
        else:
            self.open_path(path, list_folder=True)

    def set_root(self, root: Path) -> None:
        """List ``root`` on the home screen instead."""
        self.root = Path(root).resolve()
        self.root_label = home_label(self.root)
        self.action_go_home()
        home = self.screen_stack[1] if len(self.screen_stack) > 1 else None
        if home is not None and hasattr(home, "set_root_label"):
            home.set_root_label(self.root_label)
            home.refresh_listing()

    # ---- configs ------------------------------------------------------------------------------------------
    def action_new_config(self) -> None:
        from probe_tui.app.screens.start import StartScreen

        try:
            tasks = [(name, self.backend.task_doc(name)) for name in self.backend.tasks()]
        except Exception as exc:
            self.notify(f"config schemas unavailable: {exc}", severity="error")
            return
        self.push_screen(StartScreen(tasks, sample_configs()), self._start_chosen)

    def _start_chosen(self, choice: Optional[Tuple[str, str]]) -> None:
        if choice is None:
            return
        kind, value = choice
        if kind == "task":
            try:
                data = self.backend.starter(value)
            except Exception as exc:
                self.notify(f"{value}: no starter config: {exc}", severity="error")
                return
            self.open_builder(data, path=None, origin=f"probe-tui init {value}")
        elif kind == "sample":
            sample = Path(value)
            self.load_into_builder(sample, as_template=True)
        else:
            self.action_load_config()

    def action_load_config(self) -> None:
        from probe_tui.app.screens.path_prompt import PathPrompt

        def chosen(path: Optional[Path]) -> None:
            if path is not None:
                self.load_into_builder(path)

        self.push_screen(PathPrompt("Load a config (ours, or msprobe's config.json)", self.root, must_exist=True),
                         chosen)

    def open_builder(self, data: Dict[str, Any], *, path: Optional[Path], origin: str = "",
                     notes: Optional[List[Any]] = None, suggested_name: Optional[str] = None) -> None:
        from probe_tui.app.screens.builder import BuilderScreen

        screen = BuilderScreen(data, path=path, backend=self.backend, origin=origin, notes=notes)
        screen.suggested_name = suggested_name
        self.push_screen(screen)

    def load_into_builder(self, path: Path, screen: Any = None, as_template: bool = False) -> None:
        """Read a config file (ours or msprobe's) into a builder: ``screen``'s form, or a new builder.
        ``as_template`` (a shipped sample) leaves the builder without a save path."""
        path = Path(path)
        try:
            loaded = self.backend.read_file(path)
        except ValueError as exc:
            self.notify(str(exc), severity="error", title="Cannot load")
            return
        except Exception as exc:
            self.notify(f"{path}: cannot load: {exc}", severity="error", title="Cannot load")
            return
        issues = loaded.validation.issues
        if issues:
            self.notify(f"{path.name}: {len(issues)} error(s), shown at their fields", severity="warning")
        notes = loaded.validation.warnings
        save_path: Optional[Path] = path
        origin = ""
        suggestion = None
        if as_template:
            save_path, origin = None, f"sample {path.name}"
        elif notes:
            # Keys were dropped (an msprobe config): saving must not overwrite the user's file with our shape.
            save_path, origin = None, f"{path.name}, {len(notes)} msprobe key(s) dropped"
            suggestion = f"{path.stem}_probe.json"
        if screen is not None:
            screen.path = save_path
            screen.origin = origin or f"loaded {path.name}"
            screen.suggested_name = suggestion
            self.call_later(self._replace_builder_form, screen, loaded.data, notes)
        else:
            self.open_builder(loaded.data, path=save_path, origin=origin, notes=notes, suggested_name=suggestion)

    async def _replace_builder_form(self, screen: Any, data: Dict[str, Any], notes: List[Any]) -> None:
        await screen.replace_form(data, notes)
        screen.mark_saved()

    def edit_run_config(self, run_path: Path) -> None:
        import json

        try:
            run = json.loads((Path(run_path) / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.notify(f"{run_path}/run.json: cannot read: {exc}", severity="error")
            return
        config = run.get("config")
        if not isinstance(config, dict):
            self.notify(f"{run_path}/run.json holds no config", severity="warning")
            return
        self.open_builder(config, path=None, origin=f"run {run.get('run_id') or Path(run_path).name}")

    # ---- runs ---------------------------------------------------------------------------------------------
    def start_run(self, config_path: Path) -> None:
        from probe_tui.app.screens.run import RunScreen

        command = self.run_command + [str(config_path)] if self.run_command else None
        self.push_screen(RunScreen(Path(config_path), cwd=self.workdir, command=command, env=self.run_env))

    def track_child(self, child: ChildRun) -> None:
        self.children_started.append(child)

    def freeze_startup(self) -> None:
        """Leave the objects the app holds from its start (modules, stylesheets, home; ~90,000) out of every later
        garbage collection: the oldest collection, which frees the views closed since the last one, walked them
        all each time (60-80 ms of CPU at the key it fell on, every few opens of a view). Home calls it once
        its listing is drawn and the views are imported; the garbage of the start is collected first."""
        gc.collect()
        gc.freeze()
        self.startup_frozen = True

    def on_unmount(self) -> None:
        for child in self.children_started:  # no probe-tui-launch-* folder stays behind
            child.cleanup()
        if self.startup_frozen:  # (an app run in a longer process, tests: its objects can be collected again)
            gc.unfreeze()
            self.startup_frozen = False

    def running_children(self) -> List[ChildRun]:
        """Runs still going (not those that reported their end and are only exiting)."""
        return [c for c in self.children_started if c.running and not c.reported_end]

    async def action_quit(self) -> None:
        running = self.running_children()
        if not running:
            self.exit()
            return
        from probe_tui.app.screens.confirm import ConfirmScreen

        def answered(choice: str) -> None:
            if choice == "stop":
                for child in running:
                    child.stop()
                self.exit()
            elif choice == "leave":
                self.exit()

        pids = ", ".join(str(c.pid) for c in running)
        self.push_screen(ConfirmScreen(f"A run is still going (pid {pids}).",
                                       [("Stop it and quit", "stop"), ("Quit, leave it running", "leave"),
                                        ("Stay", "cancel")]), answered)

