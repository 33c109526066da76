"""The one action registry of the app.

Every key the app answers to is an :class:`AppAction` here. The registry feeds the ``BINDINGS`` of the app and of
each screen (:func:`bindings_for`), the footer (Textual reads those bindings), the generated help screen and
``docs/APP.md`` (:func:`actions_by_group`), and the command palette (``probe_tui.app.commands``). Binding ids make
the keys remappable through Textual's keymap (``App.set_keymap``): ``{"builder.save": "ctrl+w"}``.
"""

import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from textual.binding import Binding

# Scopes: "app" actions work everywhere; the others belong to one screen.
SCOPES = ("app", "table", "home", "builder", "run", "summary", "compare", "dump", "monitor", "grad", "overflow",
          "freebench", "ranks", "help", "diagnose", "acccheck", "onlinecheck")

SCOPE_TITLES = {
    "app": "Everywhere",
    "table": "Any table (runs, configs, alerts, grad compare, free_benchmark, overflow, acc_check)",
    "home": "Home (runs and configs)",
    "builder": "Config builder",
    "run": "Run",
    "summary": "Run summary",
    "compare": "Compare browser",
    "dump": "Dump browser",
    "monitor": "Live monitor",
    "grad": "Grad compare",
    "overflow": "Overflow check",
    "freebench": "free_benchmark",
    "ranks": "Rank picker",
    "help": "Help",
    "diagnose": "Diagnose verdict",
    "acccheck": "acc_check result",
    "onlinecheck": "Online check",
}


@dataclass(frozen=True)
class AppAction:
    """One user action: what it does, which keys run it and where it applies."""

    id: str
    """Binding id (``scope.name``); the key a user keymap uses."""
    action: str
    """The Textual action string run on the scope's screen (or the app for scope ``app``)."""
    keys: str
    """Comma-separated Textual key names; the first is the one shown."""
    description: str
    """Short label: footer, help and palette."""
    group: str
    """Heading in the help screen."""
    scope: str
    help: str = ""
    """One sentence for the help screen and the palette."""
    show: bool = True
    """Shown in the footer."""
    palette: bool = True
    """Offered in the command palette."""
    priority: bool = False
    """Checked before the focused widget (for keys an input would otherwise swallow)."""
    key_display: Optional[str] = None
    """How the footer shows the keys (default: Textual's display of the first key)."""

    @property
    def key_list(self) -> List[str]:
        return [k.strip() for k in self.keys.split(",") if k.strip()]

    def binding(self) -> Binding:
        return Binding(
            self.keys,
            self.action,
            self.description,
            show=self.show,
            priority=self.priority,
            tooltip=self.help,
            id=self.id,
            key_display=self.key_display,
        )


def rank_actions(scope: str, every: str) -> Tuple[AppAction, ...]:
    """The rank selector of a view of a multi-rank run (hidden on a one-rank run): ``R`` picks a rank from a list,
    ``<`` / ``>`` step through them. ``every`` says what the view shows for every rank at once ("" when it shows
    one rank at a time)."""
    choose = "Choose the rank to show" + ("; or every rank: " + every if every else "") + "."
    return (
        AppAction(f"{scope}.rank", "pick_rank", "R", "Rank", "Ranks", scope, choose),
        AppAction(f"{scope}.rank_next", "step_rank(1)", "greater_than_sign", "Next rank", "Ranks", scope,
                  "Show the next rank" + (" (after the last: every rank)." if every else "."), show=False),
        AppAction(f"{scope}.rank_prev", "step_rank(-1)", "less_than_sign", "Prev rank", "Ranks", scope,
                  "Show the previous rank" + (" (before the first: every rank)." if every else "."), show=False),
    )


ACTIONS: Tuple[AppAction, ...] = (
    # Everywhere
    AppAction("app.help", "help", "f1,question_mark", "Help", "General", "app",
              "Show every key of the current screen and of the app."),
    AppAction("app.palette", "command_palette", "ctrl+p", "Commands", "General", "app",
              "Open the command palette: type to find any action.", show=False, palette=False),
    AppAction("app.home", "go_home", "ctrl+g", "Home", "General", "app",
              "Go back to the home screen (runs and configs).", show=False),
    AppAction("app.open_path", "open_any", "ctrl+e", "Open a path", "General", "app",
              "Open a run, rank or step folder, a dump.json, a metrics.h5, a compare result or a config in its "
              "view; a folder of runs becomes the folder home lists.", show=False),
    AppAction("app.first_row", "table_edge('first')", "home", "First row", "General", "app",
              "In a table: move to the first row.", show=False, palette=False, priority=True),
    AppAction("app.last_row", "table_edge('last')", "end", "Last row", "General", "app",
              "In a table: move to the last row.", show=False, palette=False, priority=True),
    AppAction("app.quit", "quit", "ctrl+q", "Quit", "General", "app",
              "Leave probe-tui.", show=False, priority=True),
    # Any table (FindTable: the compare and dump browsers have their own search and filter)
    AppAction("table.find", "find", "slash", "Search", "Find", "table",
              "Search the table's rows (any cell); enter returns to the table, esc clears the search."),
    AppAction("table.filter", "next_filter", "f", "Filter", "Find", "table",
              "Cycle the table's filters (the count above the table names the one in use).", show=False),
    # Home
    AppAction("home.new", "new_config", "n", "New config", "Configs", "home",
              "Choose a task and a starting point, then edit the config in a form."),
    AppAction("home.open", "open_selected", "o,enter", "Open", "Runs", "home",
              "Open the selected run, or edit the selected config file.", show=True),
    AppAction("home.open_path", "app.open_any", "p", "Open path", "Runs", "home",
              "Open any path in its view: a run, rank or step folder, a dump.json, a metrics.h5, a compare result, "
              "a config; a folder of runs is listed here instead.", palette=False),
    AppAction("home.demo", "run_demo", "d", "Run the demo", "Runs", "home",
              "Run the shipped demo (a tiny model on CPU, a few steps) in this folder and watch it; its dump "
              "opens from the run screen.", show=False),
    AppAction("home.edit", "edit_selected", "e", "Edit config", "Configs", "home",
              "Edit the selected config file, or the config a selected run was made with."),
    AppAction("home.load", "load_config", "l", "Load file", "Configs", "home",
              "Load a config file (ours or msprobe's config.json) into the config builder."),
    AppAction("home.run", "run_selected", "x", "Run", "Configs", "home",
              "Run the selected config file on this machine and watch its progress."),
    AppAction("home.refresh", "refresh", "r,f5", "Refresh", "Runs", "home",
              "Look for runs and configs again."),
    AppAction("home.diagnose", "diagnose_selected", "g", "Diagnose", "Runs", "home",
              "(g for the guilty op.) Press on a run to mark it as the reference, then on the run under test: finds the op that "
              "introduced their difference and opens the verdict.", show=False),
    AppAction("home.switch", "switch_table", "tab", "Runs/Configs", "Runs", "home",
              "Move between the runs table and the configs table.", show=False, palette=False),
    AppAction("home.quit", "app.quit", "q", "Quit", "General", "home", "Leave probe-tui.", palette=False),
    # Config builder (control keys: letters go to the focused input)
    AppAction("builder.save", "save", "ctrl+s", "Save", "File", "builder",
              "Save the config as JSON (asks for a file name the first time).", priority=True),
    AppAction("builder.save_as", "save_as", "f2", "Save as", "File", "builder",
              "Save the config under a new file name.", show=False),
    AppAction("builder.load", "load", "ctrl+o", "Load", "File", "builder",
              "Replace the form with a config file (ours or msprobe's).", priority=True),
    AppAction("builder.run", "run", "ctrl+r", "Run", "Run", "builder",
              "Save the config, then run it and watch its progress.", priority=True),
    AppAction("builder.task", "choose_task", "ctrl+t", "Task", "Form", "builder",
              "Move to the task chooser (the form follows the task).", priority=True),
    AppAction("builder.next_error", "next_error", "ctrl+n", "Next error", "Form", "builder",
              "Move to the next field with an error.", priority=True),
    AppAction("builder.advanced", "toggle_advanced", "ctrl+b", "Advanced", "Form", "builder",
              "Unfold or fold every section of advanced fields.", priority=True),
    AppAction("builder.back", "back", "escape", "Back", "General", "builder",
              "Leave the builder (asks first when there are unsaved changes)."),
    # Run
    AppAction("run.stop", "stop", "s,ctrl+c", "Stop", "Run", "run",
              "Stop the run cleanly (SIGINT, then SIGTERM after a grace period); finished steps are kept.",
              key_display="s"),
    AppAction("run.open_result", "open_result", "o", "Open result", "Run", "run",
              "Open what the run wrote once it has finished; a monitor run opens its live charts at once."),
    AppAction("run.edit", "edit_config", "e", "Edit config", "Run", "run",
              "Go back to the config builder with this config."),
    AppAction("run.back", "back", "escape", "Back", "General", "run",
              "Leave this screen (a run still going is asked about first)."),
    # Run summary
    AppAction("summary.edit", "edit_config", "e", "Edit config", "Run", "summary",
              "Open the config this run was made with in the config builder."),
    AppAction("summary.back", "back", "escape,q", "Back", "General", "summary", "Back to the previous screen."),
    # Compare browser
    AppAction("compare.results", "show_tab('results')", "1", "Results", "Views", "compare",
              "Show the table of compare results (every row, coloured by verdict)."),
    AppAction("compare.divergence", "show_tab('divergence')", "2", "Divergence", "Views", "compare",
              "Show the first-divergence list: operators ranked by the error they add."),
    AppAction("compare.tree", "show_tab('tree')", "3", "Tree", "Views", "compare",
              "Show the model hierarchy, each module coloured by its worst verdict."),
    AppAction("compare.next_error", "next_error", "n", "Next error", "Find", "compare",
              "Move to the next row with an error (a warning when there is no error; wraps around)."),
    AppAction("compare.prev_error", "previous_error", "N", "Prev error", "Find", "compare",
              "Move to the previous row with an error (or warning).", show=False),
    AppAction("compare.search", "search", "slash,ctrl+f", "Search", "Find", "compare",
              "Keep the rows whose record or module name matches (text, a glob, or re:regex); empty clears.",
              key_display="/"),
    AppAction("compare.filter", "cycle_filter", "f", "Filter", "Find", "compare",
              "Cycle the verdict filter: all, problems, errors, warnings, unmatched."),
    AppAction("compare.sort", "cycle_sort", "s", "Sort", "Find", "compare",
              "Cycle the sort: dump order, worst verdict, rel_err (cosine, max_abs_err in tensor mode), name."),
    AppAction("compare.reverse", "reverse_sort", "r", "Reverse", "Find", "compare",
              "Reverse the sort order.", show=False),
    AppAction("compare.goto", "goto_rows", "g", "Go to rows", "Views", "compare",
              "From a suspect or a tree node: show its rows in the results table."),
    AppAction("compare.detail", "toggle_detail", "d", "Detail", "Views", "compare",
              "Show or hide the detail pane (hidden, the table uses the whole width)."),
    AppAction("compare.files", "files", "i", "Files", "General", "compare",
              "Show the result folder's files and run.json.", show=False),
    *rank_actions("compare", "every rank's rows, the first divergence across ranks, each rank's tree"),
    AppAction("compare.back", "back", "escape,q", "Back", "General", "compare",
              "Close the search, or go back to the previous screen."),
    # Dump browser
    AppAction("dump.search", "search", "slash,ctrl+f", "Search", "Find", "dump",
              "Keep the records whose name or module matches (text, a glob, or re:regex); empty clears.",
              key_display="/"),
    AppAction("dump.nonfinite", "toggle_nonfinite", "f", "Inf/NaN only", "Find", "dump",
              "Keep only the records with a NaN or an inf in a tensor (reads every step and rank once)."),
    AppAction("dump.next", "next_match", "n", "Next match", "Find", "dump",
              "Move to the next record that matches the filter (or holds inf/nan when nothing is filtered)."),
    AppAction("dump.slice", "slice", "v", "Slice", "Tensor", "dump",
              "Show a slice of the selected tensor: an index like 0, :8 (empty: its first values)."),
    AppAction("dump.log", "toggle_log", "l", "Log scale", "Tensor", "dump",
              "Switch the histogram between values and log10 of their magnitudes."),
    AppAction("dump.files", "files", "i", "Files", "General", "dump",
              "Show the dump folder's files (and run.json).", show=False),
    *rank_actions("dump", "each step lists every rank"),
    AppAction("dump.back", "back", "escape,q", "Back", "General", "dump",
              "Close the search or slice field, or go back to the previous screen."),
    # Live monitor
    AppAction("monitor.pause", "toggle_pause", "space", "Pause", "Live", "monitor",
              "Freeze the chart and the alert list (the header keeps counting); again to resume."),
    AppAction("monitor.series", "pick_series", "s", "Series", "Chart", "monitor",
              "Choose the series to chart: type to filter, space to tick (up to 8 lines)."),
    AppAction("monitor.zoom_in", "zoom_in", "plus,equals_sign", "Zoom in", "Chart", "monitor",
              "Halve the step window (it keeps following the newest step unless you moved it)."),
    AppAction("monitor.zoom_out", "zoom_out", "minus", "Zoom out", "Chart", "monitor",
              "Double the step window."),
    AppAction("monitor.earlier", "pan(-1)", "left_square_bracket", "Earlier", "Chart", "monitor",
              "Move the step window back by half its width.", show=False),
    AppAction("monitor.later", "pan(1)", "right_square_bracket", "Later", "Chart", "monitor",
              "Move the step window forward; at the end it follows the newest step again.", show=False),
    AppAction("monitor.all_steps", "all_steps", "0", "All steps", "Chart", "monitor",
              "Show every step and follow the newest."),
    AppAction("monitor.log", "toggle_log", "l", "Log y", "Chart", "monitor",
              "Switch the chart's y axis between linear and log scale."),
    AppAction("monitor.alerts", "focus_alerts", "a", "Alerts", "Live", "monitor",
              "Move to the alert list; enter on an alert charts its series around its step."),
    AppAction("monitor.sort_alerts", "sort_alerts", "o", "Order alerts", "Live", "monitor",
              "Order the alert groups by first step (the default), by count, or by worst value."),
    AppAction("monitor.files", "files", "i", "Files", "General", "monitor",
              "Show the run folder's files and run.json.", show=False),
    *rank_actions("monitor", "each series as its min, mean and max over the ranks"),
    AppAction("monitor.back", "back", "escape,q", "Back", "General", "monitor",
              "Close the series filter, or go back to the previous screen (the run goes on)."),
    # Diagnose verdict
    AppAction("diagnose.compare", "open_compare", "c", "Compare", "View", "diagnose",
              "Open the compare that decided the verdict (tensors when stage 2 ran, else statistics)."),
    AppAction("diagnose.back", "back", "escape,q", "Back", "General", "diagnose", "Back to the previous screen."),
    # Grad compare
    AppAction("grad.sort", "cycle_sort", "s", "Sort", "View", "grad",
              "Sort the parameters by model order or by lowest similarity."),
    AppAction("grad.step_back", "step(-1)", "left_square_bracket", "Step -", "View", "grad",
              "Show the layer ratios of the previous step.", key_display="["),
    AppAction("grad.step_on", "step(1)", "right_square_bracket", "Step +", "View", "grad",
              "Show the layer ratios of the next step.", key_display="]"),
    AppAction("grad.rank", "step_rank(1)", "r,greater_than_sign", "Next rank", "Ranks", "grad",
              "Show the next rank.", show=False),
    AppAction("grad.rank_prev", "step_rank(-1)", "less_than_sign", "Prev rank", "Ranks", "grad",
              "Show the previous rank.", show=False),
    AppAction("grad.rank_pick", "pick_rank", "R", "Rank", "Ranks", "grad", "Choose the rank to show."),
    AppAction("grad.files", "files", "i", "Files", "General", "grad",
              "Show the result folder's files (the CSVs and charts).", show=False),
    AppAction("grad.back", "back", "escape,q", "Back", "General", "grad", "Back to the previous screen."),
    # overflow_check and analyze-overflow
    AppAction("overflow.dump", "open_dump", "d", "Open dump", "View", "overflow",
              "Open the kept calls' tensors in the dump browser."),
    *rank_actions("overflow", "every rank's steps"),
    AppAction("overflow.files", "files", "i", "Files", "General", "overflow",
              "Show the run folder's files and run.json.", show=False),
    AppAction("overflow.back", "back", "escape,q", "Back", "General", "overflow", "Back to the previous screen."),
    # free_benchmark
    AppAction("freebench.all", "toggle_all", "a", "All checks", "View", "freebench",
              "Show every checked output, or only the inconsistent ones (the default)."),
    AppAction("freebench.files", "files", "i", "Files", "General", "freebench",
              "Show the run folder's files (the CSV among them).", show=False),
    AppAction("freebench.back", "back", "escape,q", "Back", "General", "freebench",
              "Back to the previous screen."),
    # acc_check result
    AppAction("acccheck.sort_status", "sort_status", "s", "By status", "View", "acccheck",
              "Sort the APIs by status: errors, warnings, not replayed, passes (worst error first in each)."),
    AppAction("acccheck.sort_error", "sort_error", "e", "By error", "View", "acccheck",
              "Sort the APIs by their largest relative error, largest first."),
    AppAction("acccheck.reproduce", "reproduce", "r", "Reproduce", "View", "acccheck",
              "Write the selected API's reproduction script and input file into the result's reproduce/ folder."),
    AppAction("acccheck.files", "files", "i", "Files", "General", "acccheck",
              "Show the result folder's files (the CSVs among them).", show=False),
    AppAction("acccheck.back", "back", "escape,q", "Back", "General", "acccheck", "Back to the previous screen."),
    # online check (a statistics/tensor run's online_check stores)
    AppAction("onlinecheck.sort_status", "sort_status", "s", "By status", "View", "onlinecheck",
              "Sort the judged calls by status: errors, warnings, passes (worst error first in each)."),
    AppAction("onlinecheck.sort_error", "sort_error", "e", "By error", "View", "onlinecheck",
              "Sort the judged calls by their largest relative error, largest first."),
    AppAction("onlinecheck.dump", "open_dump", "d", "Open dump", "View", "onlinecheck",
              "Open the run's dump (what it captured besides the check) in the dump browser."),
    AppAction("onlinecheck.files", "files", "i", "Files", "General", "onlinecheck",
              "Show the run folder's files.", show=False),
    AppAction("onlinecheck.back", "back", "escape,q", "Back", "General", "onlinecheck",
              "Back to the previous screen."),
    # Rank picker (R in a view of a multi-rank run)
    AppAction("ranks.choose", "choose", "enter", "Show", "General", "ranks",
              "Show the highlighted rank (type a rank number to find it).", show=False),
    AppAction("ranks.close", "close", "escape", "Close", "General", "ranks", "Close the picker; the rank stays."),
    # Help
    AppAction("help.close", "close", "escape,q,f1", "Close", "General", "help", "Close the help screen."),
)


def actions_for(scope: str) -> List[AppAction]:
    """The actions of one scope, in registry order."""
    if scope not in SCOPES:
        raise ValueError(f"unknown action scope {scope!r}")
    return [a for a in ACTIONS if a.scope == scope]


def bindings_for(scope: str) -> List[Binding]:
    """``BINDINGS`` for the app (scope ``app``) or one screen."""
    return [a.binding() for a in actions_for(scope)]


def actions_by_group(scope: str) -> Dict[str, List[AppAction]]:
    """The scope's actions grouped by their help heading, groups in first-seen order."""
    groups: Dict[str, List[AppAction]] = {}
    for a in actions_for(scope):
        groups.setdefault(a.group, []).append(a)
    return groups


def action_by_id(action_id: str) -> AppAction:
    for a in ACTIONS:
        if a.id == action_id:
            return a
    raise KeyError(action_id)


def key_label(key: str) -> str:
    """A key name as a person types it: ``ctrl+s`` -> ``^s``, ``question_mark`` -> ``?``."""
    names = {"question_mark": "?", "escape": "esc", "enter": "enter", "tab": "tab", "slash": "/", "plus": "+",
             "minus": "-", "equals_sign": "=", "left_square_bracket": "[", "right_square_bracket": "]",
             "exclamation_mark": "!", "full_stop": ".", "comma": ",", "greater_than_sign": ">",
             "less_than_sign": "<"}
    if key in names:
        return names[key]
    if key.startswith("ctrl+"):
        return "^" + key[5:]
    return key


def keys_label(action: AppAction, keymap: Optional[Dict[str, str]] = None) -> str:
    """The action's keys as shown in help and the palette (a user keymap's keys when it remaps the action)."""
    keys = (keymap or {}).get(action.id, action.keys)
    return " ".join(key_label(k.strip()) for k in keys.split(",") if k.strip())


def keymap_path() -> Path:
    """``$PROBE_TUI_KEYMAP``, else ``$XDG_CONFIG_HOME/probe-tui/keymap.json`` (``~/.config`` by default)."""
    explicit = os.environ.get("PROBE_TUI_KEYMAP")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "probe-tui" / "keymap.json"


def load_keymap(path: Path) -> Tuple[Dict[str, str], List[str]]:
    """A user keymap ``{"binding id": "keys"}`` and the problems found in it (unknown ids, bad values).
    A missing file is an empty keymap; a file that is not a JSON object is one problem."""
    path = Path(path)
    if not path.is_file():
        return {}, []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        return {}, [f"{path}: not a readable JSON object ({str(exc)[:100]})"]
    if not isinstance(data, dict):
        return {}, [f"{path}: a keymap is a JSON object of binding id -> keys"]
    known = {a.id for a in ACTIONS}
    keymap: Dict[str, str] = {}
    problems: List[str] = []
    for action_id, keys in data.items():
        if action_id not in known:
            close = difflib.get_close_matches(action_id, sorted(known), n=1)
            problems.append(f"{path}: unknown binding id {action_id!r}"
                            + (f" (did you mean {close[0]!r}?)" if close else ""))
        elif not isinstance(keys, str) or not keys.strip():
            problems.append(f"{path}: {action_id}: keys must be a non-empty string like \"ctrl+s\"")
        else:
            keymap[action_id] = keys
    return keymap, problems
