"""`specroute report LOG... [--out DIR] [--project-onto gb10|FILE.yaml]`: a per-class Markdown
table and PNG plots from any set of decision logs, for sharing results.

With `--project-onto`, a separate, clearly labelled section computes what the acceptance measured
in these logs would give on another machine's step costs (`router.ops.projection`): on a CPU box
speculation loses everywhere, and the question is what the same traffic does on the GB10.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from decisionlog.readers import iter_log_records
from decisionlog.records import ReadStats, RouteRecord
from decisionlog.summary import GroupSummary, by_class, by_class_lang, summarize, total
from fileio.yamlfile import ConfigError, load_model
from policies import ArmRow, arm_rows, has_extra_arms
from router.ops.projection import (
    Projection,
    ProjectionError,
    StepCosts,
    break_even_acceptance,
    preset,
    project,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

GROUPINGS: Final[dict[str, Callable[[RouteRecord], str]]] = {
    "class": by_class,
    "class-lang": by_class_lang,
}
PROJECTION_BANNER: Final = "PROJECTION (computed from a cost model, not measured)"


def load_costs(spec: str) -> StepCosts:
    """A preset name (`gb10`) or a YAML file of step costs (named after the file by default)."""
    if not spec.endswith((".yaml", ".yml")) and os.sep not in spec:
        return preset(spec)
    try:
        costs = load_model(spec, StepCosts)
    except ConfigError as exc:
        raise ProjectionError(str(exc)) from exc
    return costs if costs.name else costs.model_copy(update={"name": Path(spec).stem})


@dataclass(frozen=True, slots=True)
class Report:
    groups: list[GroupSummary]
    overall: GroupSummary
    stats: ReadStats
    sources: list[str]
    costs: StepCosts | None
    projections: dict[str, Projection]  # group key -> projection (groups with acceptance)
    arms: list[ArmRow] = field(default_factory=list)  # per class and arm (pool + rewrite)


def build_report(
    records: Sequence[RouteRecord],
    stats: ReadStats,
    sources: Sequence[str],
    *,
    grouping: str = "class",
    costs: StepCosts | None = None,
) -> Report:
    groups = summarize(records, GROUPINGS[grouping])
    # Each class's own gate-skip share where the logs show a gate at work (any skipped cycle);
    # where the engine has no gate (llama.cpp), the cost model's share for every class.
    gated = any((g.gate_skip or 0.0) > 0 for g in groups)
    projections = {
        g.key: project(g.acceptance, costs, g.gate_skip if gated else None)
        for g in groups
        if costs is not None and g.acceptance is not None
    }
    return Report(groups, total(groups, records), stats, list(sources), costs, projections,
                  arm_rows(records))


def _f(value: float | None, pattern: str) -> str:
    return "–" if value is None else pattern.format(value)


def render_markdown(report: Report) -> str:
    lines = ["# specroute report", "", f"Logs: {', '.join(report.sources)}  ",
             f"Read: {report.stats.summary()}", "", "## Measured, per class", ""]
    lines += [
        ("| class | requests | errors | routed to mtp | mtp tok/s | plain tok/s | speedup "
        "| speedup, like with like | predicted | acceptance | gate skip "
        "| TTFT p50 mtp / plain (ms) |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for group in [*report.groups, report.overall]:
        name = f"**{group.key}**" if group is report.overall else group.key
        lines.append(
            f"| {name} | {group.requests} | {group.errors} | {_f(group.mtp_share, '{:.0%}')} "
            f"| {_f(group.tps_mtp, '{:.2f}')} | {_f(group.tps_plain, '{:.2f}')} "
            f"| {_f(group.speedup, '{:.3f}x')} | {_f(group.matched_speedup, '{:.3f}x')} "
            f"| {_f(group.predicted_speedup, '{:.3f}x')} | {_f(group.acceptance, '{:.3f}')} "
            f"| {_f(group.gate_skip, '{:.0%}')} "
            f"| {_f(group.ttft_p50_mtp, '{:.0f}')} / {_f(group.ttft_p50_plain, '{:.0f}')} |"
        )
    lines += [
        "",
        ("Tokens/s is decode throughput (completion tokens over decode time); speedup is mtp over "
        "plain tokens/s of whatever each profile served; *like with like* compares them only "
        "within groups of requests the router judged alike (same predicted speedup), so that "
        "the explored and misread requests sent to one profile are not set against the whole "
        "class on the other; *predicted* is what the decisions expected; acceptance is accepted "
        "over drafted tokens on mtp; gate skip is the share of mtp cycles the margin gate "
        "skipped."),
        "",
        ("Estimated gain of the routing as logged (class averages, not a replay): "
        f"{_f(report.overall.gain_vs_always_mtp, '{:+.1%}')} vs always-mtp, "
        f"{_f(report.overall.gain_vs_never_mtp, '{:+.1%}')} vs never-mtp."),
    ]
    if has_extra_arms(report.arms):
        lines += ["", *_arms_markdown(report.arms)]
    if report.costs is not None:
        lines += ["", *_projection_markdown(report, report.costs)]
    return "\n".join(lines) + "\n"


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _arms_markdown(rows: Sequence[ArmRow]) -> list[str]:
    """The arms beyond mtp and plain: each pool and rewrite a route sent requests to."""
    lines = [
        "## Arms, per class (pool and rewrite)", "",
        "| class | arm | requests | share | decode tok/s | time to the answer (ms) | tokens |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.cls} | {row.arm} | {row.requests} | {row.share:.0%} "
            f"| {_f(_finite(row.decode_tps), '{:.2f}')} | {row.total_ms:.0f} "
            f"| {row.completion_tokens:.0f} |"
        )
    lines += ["", ("Arms that send the same request are compared on decode rate; arms whose "
                   "rewrite changes the answer (thinking, model alias, length cap) on the time "
                   "to the answer.")]
    return lines


def _projection_markdown(report: Report, costs: StepCosts) -> list[str]:
    even = break_even_acceptance(costs)
    lines = [
        f"## {PROJECTION_BANNER}: onto {costs.name}",
        "",
        (f"> **Projection, not a measurement.** The acceptance measured in these logs, put through "
        f"the depth-1 cost model of {costs.label()}. Tokens/s here are computed, not observed. "
        f"Break-even acceptance on this model: {_f(even, '{:.3f}')}."),
        "",
        (f"| class | measured acceptance | gate skip used | projected plain tok/s "
        f"| projected mtp tok/s | projected speedup on {costs.name} |"),
        "|---|---:|---:|---:|---:|---:|",
    ]
    for group in report.groups:
        proj = report.projections.get(group.key)
        if proj is None:
            lines.append(f"| {group.key} | – | – | – | – | no acceptance measured |")
            continue
        lines.append(
            f"| {group.key} | {proj.acceptance:.3f} | {proj.gate_skip:.0%} "
            f"| {proj.tps_plain:.2f} | {proj.tps_mtp:.2f} "
            f"| {proj.speedup:.3f}x |"
        )
    return lines


def write_plots(report: Report, out_dir: Path) -> list[Path]:
    """PNG plots: tokens/s per profile, acceptance, speedup (measured and projected)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    keys = [g.key for g in report.groups]
    positions = list(range(len(keys)))
    written: list[Path] = []

    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(keys) + 2), 4))
    for offset, (label, values) in zip((-0.2, 0.2), (
        ("mtp", [g.tps_mtp or 0.0 for g in report.groups]),
        ("plain", [g.tps_plain or 0.0 for g in report.groups]),
    ), strict=True):
        ax.bar([p + offset for p in positions], values, width=0.4, label=label)
    _finish_axes(ax, keys, "decode tokens/s (measured)", "Tokens/s by profile and class")
    written.append(_save(fig, out_dir / "tokens_per_second.png"))

    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 * len(keys) + 2), 4))
    ax.bar(positions, [g.acceptance or 0.0 for g in report.groups], color="tab:green")
    if report.costs is not None and (even := break_even_acceptance(report.costs)) is not None:
        ax.axhline(even, color="tab:red", linestyle="--",
                   label=f"break-even on {report.costs.name} (projection)")
        _legend_below(ax)
    ax.set_ylim(0, 1)
    _finish_axes(ax, keys, "accepted / drafted (measured)", "Draft acceptance by class",
                 legend=False)
    written.append(_save(fig, out_dir / "acceptance.png"))

    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(keys) + 2), 4))
    width = 0.4 if report.costs is not None else 0.6
    # bars grow from 1.0 (break-even) up or down: a gain reads as a gain, a loss as a loss
    measured = [(g.matched_speedup or g.speedup or 1.0) - 1.0 for g in report.groups]
    ax.bar([p - (0.2 if report.costs else 0.0) for p in positions], measured, width=width,
           bottom=1.0, label="measured here (like with like)")
    if report.costs is not None:
        projected = [report.projections[k].speedup - 1.0 if k in report.projections else 0.0
                     for k in keys]
        ax.bar([p + 0.2 for p in positions], projected, width=width, bottom=1.0, hatch="//",
               label=f"PROJECTION onto {report.costs.name}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    _finish_axes(ax, keys, "mtp tok/s ÷ plain tok/s", "Speedup of mtp over plain")
    written.append(_save(fig, out_dir / "speedup.png"))
    return written


def _finish_axes(
    ax: Axes, keys: list[str], ylabel: str, title: str, *, legend: bool = True
) -> None:
    ax.set_xticks(range(len(keys)), keys, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        _legend_below(ax)


def _legend_below(ax: Axes) -> None:
    # below the axes, so it never hides a bar
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)


def _save(fig: Figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_report(
    logs: Sequence[str], out_dir: Path, *, project_onto: str | None, grouping: str
) -> tuple[Report, Path, list[Path]]:
    """Read the logs, write `report.md` and the PNGs into `out_dir`; what was written."""
    costs = load_costs(project_onto) if project_onto else None
    stats = ReadStats()
    records = list(iter_log_records(logs, stats))
    report = build_report(records, stats, logs, grouping=grouping, costs=costs)
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = out_dir / "report.md"
    plots = write_plots(report, out_dir)
    images = "\n".join(f"![{p.stem}]({p.name})" for p in plots)
    markdown.write_text(render_markdown(report) + "\n" + images + "\n", encoding="utf-8")
    return report, markdown, plots
