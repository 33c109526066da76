"""The grad compare view: the 0.97 / 0.03 rule's verdict, every parameter with its lowest similarity and its
violations, the similarity chart of the parameter under the cursor (the threshold drawn across it), and the
layer-wise gradient-norm ratio of one step (the layer where the growth starts marked)."""

import math
from pathlib import Path
from typing import Any, List, Optional

import numpy as np
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Label, Static

from probe_tui.app.actions import bindings_for
from probe_tui.app.data.grad_result import GradResult, RankResult
from probe_tui.app.ranks import RankSelector
from probe_tui.app.screens.base import ResultScreen
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.styles import themed
from probe_tui.app.widgets.find_table import FindTable
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.app.widgets.metric_chart import MetricChart
from probe_tui.app.widgets.rank_bar import RankBar
from probe_tui.formatting import number_text

BAR_HALF = 10


def ratio_bar(ratio: float, tolerance: float, over: bool) -> Text:
    """A bar centred on 1.0: left for a ratio below 1, right above; full at 4× the tolerance; red when over."""
    if not math.isfinite(ratio):
        return Text(" " * BAR_HALF + "?" + " " * BAR_HALF, style=themed("bold error"))
    deviation = ratio - 1.0
    n = int(math.ceil(min(1.0, abs(deviation) / (4 * tolerance)) * BAR_HALF)) if tolerance > 0 else 0
    style = themed("bold error") if over else themed("success")
    left = " " * (BAR_HALF - n) + "█" * n if deviation < 0 else " " * BAR_HALF
    right = "█" * n + " " * (BAR_HALF - n) if deviation > 0 else " " * BAR_HALF
    return Text.assemble((left, style), ("│", "dim"), (right, style))


def layer_table(rank: RankResult, s: int, tolerance: float) -> Table:
    step = rank.layer_steps[s]
    first = rank.first_over.get(step)
    table = Table(box=None, padding=(0, 1), header_style="bold",
                  title="grad norm ratio target / golden per layer, step {} (tolerance {})".format(step, tolerance),
                  title_justify="left", title_style="bold")
    table.add_column("#", justify="right")
    table.add_column("layer", no_wrap=True)
    table.add_column("ratio", justify="right")
    table.add_column("below 1 │ above 1", no_wrap=True)
    table.add_column("")
    for depth, layer in enumerate(rank.layers):
        ratio = float(rank.ratio[depth, s])
        over = bool(rank.over[depth, s])
        mark = Text("← growth starts here", style=themed("bold error")) if depth == first else Text("over" if over else "")
        table.add_row(str(depth), layer, number_text(ratio, 5), ratio_bar(ratio, tolerance, over), mark,
                      style=themed("error") if over else "")
    return table


class GradScreen(RankSelector, ResultScreen):
    ALL_RANKS = False  # one rank's parameters at a time
    SCOPE = "grad"
    CSS_PATH = "grad.tcss"
    BINDINGS = bindings_for("grad")

    FOCUS = "#params"
    VERDICT = "#grad-verdict"
    TITLE = "Grad compare"
    READ_ERROR = "{exc}"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.result: Optional[GradResult] = None
        self.init_ranks()
        self.by_similarity = False
        self.layer_step = 0
        self.order: List[int] = []
        self.verdict_renderable: Any = None
        self.layers_renderable: Any = None

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("Grad compare", "bold"), " · " + relative_text(self.path, self.app.root)),
                     id="grad-title")
        yield Static(Text("Reading the result…", style="italic"), id="grad-verdict")
        yield RankBar()
        with Horizontal(id="grad-body"):
            with Vertical(id="grad-left"):
                yield Label("Parameters", id="params-title", classes="pane-title")
                yield FindTable(id="params", counter="#params-title", filters=[("broken rule", self._broken)])
            with Vertical(id="grad-right"):
                yield MetricChart(id="grad-chart")
                with VerticalScroll(id="grad-layers"):
                    yield Static("", id="layers-body")
        yield KeyFooter()

    @property
    def rank_result(self) -> Optional[RankResult]:
        """The result of the rank shown (the rank selector's ``self.rank``)."""
        if self.result is None or not self.result.ranks:
            return None
        return self.result.ranks.get(self.rank) or next(iter(self.result.ranks.values()))

    def read(self) -> GradResult:
        return GradResult.read(self.path)

    def show(self, result: GradResult) -> None:
        self.result = result
        self.setup_ranks(list(result.ranks))
        self._show_rank()

    def rank_changed(self) -> None:
        self._show_rank()

    def _broken(self, key: str) -> bool:
        """The filter of the parameter table: parameters that broke the rule."""
        rank = self.rank_result
        return rank is not None and bool(rank.violations_of(rank.params[int(key)]))

    def _show_rank(self) -> None:
        rank, result = self.rank_result, self.result
        if rank is None or result is None:
            return
        first = rank.violations[0] if rank.violations else None
        multi = " (rank {})".format(rank.rank) if len(result.ranks) > 1 else ""
        if first is None:
            verdict = Text.assemble((" ✓ rule holds ", themed("bold reverse success")), " every parameter ≥ {} and no drop "
                                    "> {} over {} steps{}".format(result.threshold, result.drop, len(rank.steps), multi))
        else:
            verdict = Text.assemble((" ✗ {} / {} rule broken ".format(result.threshold, result.drop), themed("bold reverse error")),
                                    " at step {} by ".format(first.step), (first.param, "bold"), ": ",
                                    first.describe(result.threshold, result.drop),
                                    " · {} violation(s){}".format(len(rank.violations), multi))
        self.verdict_renderable = verdict
        self.query_one("#grad-verdict", Static).update(verdict)
        if rank.layer_steps:
            verdict_step = first.step if first is not None else None
            over_steps = [s for s in rank.layer_steps if s in rank.first_over]
            chosen = verdict_step if verdict_step in rank.layer_steps else (over_steps[0] if over_steps
                                                                            else rank.layer_steps[-1])
            self.layer_step = rank.layer_steps.index(chosen)
        self._fill_params()
        self._show_layers()

    def _fill_params(self) -> None:
        rank = self.rank_result
        table = self.query_one("#params", FindTable)
        threshold = self.result.threshold
        order = list(range(len(rank.params)))
        if self.by_similarity and rank.steps:
            lowest = np.where(np.isnan(rank.similarity), np.inf, rank.similarity).min(axis=1)
            order = np.argsort(lowest, kind="stable").tolist()
        self.order = order
        table.clear(columns=True)
        name_width = max(12, min(40, max((len(n) for n in rank.params), default=12)))
        for label, width in (("parameter", name_width), ("lowest", 7), ("step", 4), ("last", 7), ("rule", 34)):
            table.add_column(label, width=width, key=label)
        rows = []
        for p in order:
            sims = rank.similarity[p]
            finite = [(s, v) for s, v in zip(rank.steps, sims.tolist()) if v == v]
            low = min(finite, key=lambda sv: sv[1]) if finite else (None, math.nan)
            last = finite[-1][1] if finite else math.nan
            broken = rank.violations_of(rank.params[p])
            rule = broken[0].describe(threshold, self.result.drop) + (" (+{})".format(len(broken) - 1)
                                                                        if len(broken) > 1 else "") if broken else ""
            style = themed("error") if broken else ""
            rows.append((str(p), [Text(rank.params[p], style=style), number_text(low[1], 4),
                                  "" if low[0] is None else str(low[0]), number_text(last, 4), Text(rule, style=style)]))
        sort = "lowest similarity first" if self.by_similarity else "model order"
        table.title = "Parameters ({}; s sorts)".format(sort)
        table.set_rows(rows)
        if order:
            self._chart(order[0])

    @on(DataTable.RowHighlighted, "#params")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value is not None:
            self._chart(int(event.row_key.value))

    def _chart(self, p: int) -> None:
        rank = self.rank_result
        series = {"similarity/" + rank.params[p]: (rank.steps, rank.similarity[p])}
        if rank.summary is not None:
            series["similarity/summary"] = (rank.steps, rank.summary)
        chart = self.query_one("#grad-chart", MetricChart)
        low = float(min([v for v in rank.similarity[p].tolist() if v == v] + [self.result.threshold]))
        chart.show(series, hline=self.result.threshold, ylim=(min(low, self.result.threshold) - 0.01, 1.005),
                   order=list(series))

    def _show_layers(self) -> None:
        rank = self.rank_result
        body = self.query_one("#layers-body", Static)
        if rank is None or not rank.layer_steps:
            body.update(Text("No layer ratios in this result.", style="italic dim"))
            return
        self.layers_renderable = layer_table(rank, self.layer_step, self.result.tolerance)
        body.update(self.layers_renderable)

    def action_cycle_sort(self) -> None:
        if self.rank_result is not None:
            self.by_similarity = not self.by_similarity
            self._fill_params()

    def action_step(self, delta: int) -> None:
        rank = self.rank_result
        if rank is None or not rank.layer_steps:
            return
        self.layer_step = (self.layer_step + delta) % len(rank.layer_steps)
        self._show_layers()

    def action_files(self) -> None:
        self.app.open_path(self.path, kind="run")

    def action_back(self) -> None:
        self.dismiss()
