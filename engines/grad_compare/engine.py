"""The grad_compare analysis engine: two grad_probe dumps -> similarities, the rule's verdict, layer ratios.

Output (per rank, in ``output_path`` or a new run folder under ``dump_path``): ``similarities.csv``,
``rule_violations.csv``, ``layer_ratios.csv`` and, with ``plots``, PNG charts beside them. Exit code 3 when the
0.97 / 0.03 rule finds a problem (the runner reports it as findings).
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from engines import safe_fs
from engines.errors import EXIT_FINDINGS, EXIT_OK
from engines.events import EventSink
from engines.grad_compare.compute import compare_rank
from engines.grad_compare.layers import LayerRatios, layer_ratios
from engines.grad_compare.rule import RuleVerdict, apply_rule
from engines.grad_compare.similarity import SimilarityTable
from engines.grad_compare.sources import GradSource, SourceError, open_grads
from schemas.analysis import GradCompareJob, GradCompareSection

DEFAULT_LAYER_TOLERANCE = 0.1


@dataclass
class GradCompareResult:
    exit_code: int
    summary: Dict[str, Any] = field(default_factory=dict)
    run_dir: Optional[str] = None


def _output_dir(job: GradCompareJob, section: GradCompareSection) -> Tuple[Path, Any]:
    if section.output_path:
        path = Path(section.output_path)
        safe_fs.make_dirs(path)
        return path, None
    from engines.runs import create_run

    config = job.model_dump(mode="json") if hasattr(job, "model_dump") else {}
    try:
        from schemas import dump_config

        config = dump_config(job)
    except Exception:
        pass
    run = create_run(job.dump_path, task="grad_compare", config=config, framework="none")
    return Path(run.path), run


def layer_tolerance(section: GradCompareSection) -> float:
    """Relative deviation of a layer's norm ratio from 1 that marks it; unset (or 0) means 0.1."""
    value = getattr(section, "layer_tolerance", None)
    return DEFAULT_LAYER_TOLERANCE if not value else float(value)


def run_grad_compare(job: GradCompareJob, events: EventSink) -> GradCompareResult:
    """Raises :class:`SourceError` (bad input, exit code 2: the runner makes it the job's one-line error) for a
    path that holds no grad dump, a damaged one, or two dumps with no rank in common; nothing is written then."""
    section = job.grad_compare
    target = _open(section.target_path, "grad_compare.target_path")
    try:
        golden = _open(section.golden_path, "grad_compare.golden_path")
    except SourceError:
        target.close()
        raise
    try:
        return _compare(job, section, target, golden, events)
    finally:
        target.close()
        golden.close()


def _open(path: str, field_name: str) -> GradSource:
    try:
        return open_grads(path)
    except SourceError as exc:
        raise SourceError(f"{field_name}: {exc}") from None


def _compare(job: GradCompareJob, section: GradCompareSection, target: GradSource, golden: GradSource,
             events: EventSink) -> GradCompareResult:
    ranks = sorted(set(target.ranks()) & set(golden.ranks()))
    wanted_ranks = list(getattr(section, "rank", None) or [])
    if wanted_ranks:
        ranks = [r for r in ranks if r in wanted_ranks]
    if not ranks:
        raise SourceError(f"grad_compare: no rank in common between {section.target_path} ({target.ranks()}) and "
                          f"{section.golden_path} ({golden.ranks()})")
    steps = list(getattr(section, "step", None) or []) or None
    # Everything is read before anything is written: a damaged dump is bad input, not a half-written result.
    comparisons = {rank: compare_rank(target, golden, rank, steps) for rank in ranks}
    if not any(c.table.steps and c.table.params for c in comparisons.values()):
        raise SourceError(_nothing_compared(section, target, golden, ranks, comparisons))
    out_dir, run = _output_dir(job, section)
    threshold = float(getattr(section, "similarity_threshold", 0.97))
    drop = float(getattr(section, "drop_threshold", 0.03))
    tolerance = layer_tolerance(section)
    plots = bool(getattr(section, "plots", True))
    summary: Dict[str, Any] = {"output": str(out_dir), "ranks": len(ranks)}
    tables: List[Dict[str, Any]] = []
    findings = False
    chart_note = None
    from engines.grad_compare import outputs

    for rank in ranks:
        comparison = comparisons[rank]
        table = comparison.table
        if not table.steps:
            events.emit("message", level="warning", text=f"rank {rank}: no step in common; skipped")
            continue
        rank_dir = out_dir / f"rank{rank}"
        safe_fs.make_private_dir(rank_dir, exist_ok=True, what="rank folder")
        verdict = apply_rule(table, threshold, drop)
        layers = layer_ratios(table.params, table.steps, comparison.target_norms, comparison.golden_norms, tolerance)
        outputs.write_similarities(rank_dir, table)
        outputs.write_violations(rank_dir, verdict)
        outputs.write_layer_ratios(rank_dir, layers)
        layer_step = _layer_step(table, verdict, layers)
        if plots:
            from engines.grad_compare.charts import draw

            written = draw(rank_dir, table, verdict, layers, layer_step)
            if not written:
                chart_note = "charts skipped: matplotlib is not installed (pip install 'probe-tui[report]')"
        prefix = "" if len(ranks) == 1 else f"rank {rank} "
        if not table.params:  # other ranks compared: this one is a finding, not "ok"
            findings = True
            summary[prefix + "rule"] = "nothing compared: no parameter name matches the golden's"
            events.emit("message", level="warning", text=f"rank {rank}: {summary[prefix + 'rule']}")
            continue
        summary[prefix + "steps compared"] = len(table.steps)
        summary[prefix + "parameters compared"] = len(table.params)
        if comparison.unmatched:
            summary[prefix + "parameters not matched"] = len(comparison.unmatched)
        if comparison.no_direction:
            summary[prefix + "parameters without directions"] = len(comparison.no_direction)
        first = verdict.first
        if first is None:
            summary[prefix + "rule"] = f"ok: every parameter >= {threshold} and no drop > {drop}"
        else:
            findings = True
            summary[prefix + "rule"] = f"broken at step {first.step} by {first.param}: {first.describe(threshold, drop)}"
            summary[prefix + "rule violations"] = len(verdict.violations)
        if layer_step is not None:
            first_layer = layers.first_over(layer_step)
            if first_layer is not None:
                summary[prefix + "first layer over tolerance"] = (
                    f"{layers.layers[first_layer]} at step {layers.steps[layer_step]} "
                    f"(ratio {layers.ratio[first_layer, layer_step]:.4g}, tolerance {tolerance})")
        tables.append(_violations_table(rank, verdict, threshold, drop))
        if layer_step is not None:
            tables.append(_layers_table(rank, layers, layer_step))
        events.emit("message", level="warning" if first else "info", text=f"rank {rank}: {summary[prefix + 'rule']}")
    if chart_note:
        summary["note"] = chart_note
        events.emit("message", level="warning", text=chart_note)
    summary["tables"] = [t for t in tables if t["rows"]]
    exit_code = EXIT_FINDINGS if findings else EXIT_OK
    if run is not None:
        run.finish(status="finished", exit_code=exit_code, summary={k: v for k, v in summary.items() if k != "tables"})
    return GradCompareResult(exit_code, summary, str(out_dir))


def _nothing_compared(section: GradCompareSection, target: GradSource, golden: GradSource, ranks: List[int],
                      comparisons: Dict[int, Any]) -> str:
    """The one line for a grad compare that matched no (step, parameter) pair: both inputs, and why."""
    rank = ranks[0]
    head = f"grad_compare: nothing compared between {section.target_path} and {section.golden_path}"
    if not any(c.table.steps for c in comparisons.values()):
        return f"{head}: no step in common (rank {rank}: {target.steps(rank)} vs {golden.steps(rank)})"
    step = next(c.table.steps[0] for c in comparisons.values() if c.table.steps)
    t_names = target.load(rank, step).names[:2] if step in target.steps(rank) else []
    g_names = golden.load(rank, step).names[:2] if step in golden.steps(rank) else []
    return f"{head}: no parameter name matches (e.g. {t_names} vs {g_names})"


def _layer_step(table: SimilarityTable, verdict: RuleVerdict, layers: LayerRatios) -> Optional[int]:
    """The step the layer view reports: the rule's verdict step, else the first step with a layer over
    tolerance, else the last step."""
    if not table.steps:
        return None
    if verdict.first is not None:
        return table.steps.index(verdict.first.step)
    first = layers.first_step_over()
    return first if first is not None else len(table.steps) - 1


def _violations_table(rank: int, verdict: RuleVerdict, threshold: float, drop: float) -> Dict[str, Any]:
    rows = [[v.step, v.param, round(v.similarity, 6), v.describe(threshold, drop)] for v in verdict.violations]
    return {"title": f"rank {rank}: 0.97 / 0.03 rule violations", "columns": ["step", "param", "similarity", "why"],
            "rows": rows}


def _layers_table(rank: int, layers: LayerRatios, s: int) -> Dict[str, Any]:
    first = layers.first_over(s)
    rows = []
    for depth, layer in enumerate(layers.layers):
        mark = "<- first over tolerance" if depth == first else ("over" if layers.over[depth, s] else "")
        rows.append([depth, layer, float(layers.ratio[depth, s]), mark])
    return {"title": f"rank {rank}: grad norm ratio target / golden per layer at step {layers.steps[s]}",
            "columns": ["depth", "layer", "ratio", ""], "rows": rows}
