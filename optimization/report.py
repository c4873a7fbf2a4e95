"""The run's report: `report.md` and `report.html` from the payload that `results.json` holds (its
screenshot is optimization/chromium.py's).

The page opens with its main figure, each candidate's and reference row's held-out gain over the
uncompiled program with its interval as an error bar, then the tables. Case ids, claim texts and
feedback carry text an LM wrote, so every string is escaped on the way out: HTML through Jinja2's
autoescape and `html.escape` in the figure, Markdown through `markdown_cell`.
"""

from __future__ import annotations

import html
import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
from markupsafe import Markup

FOLD_AT = 90  # characters of feedback shown before the fold
LABEL_CHARS = 54  # columns of a row label the figure has room for; the full label is its tooltip
CANDIDATE_COLOUR, REFERENCE_COLOUR = "#1f5fa8", "#b5651d"
TICK_STEPS = (0.01, 0.02, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
class Table:
    """One table of the report, as text cells, for both the page and the Markdown."""

    title: str
    head: list[str]
    rows: list[list[str]]
    intro: str = ""
    numeric: frozenset[int] = frozenset()  # columns aligned right
    widths: tuple[int, ...] = ()  # percent per column: a fixed layout that cannot grow sideways
    folded: int | None = None  # the column whose long cells fold
    marked: frozenset[tuple[int, int]] = field(default_factory=frozenset)  # (row, column) cells to flag


def write_report(out: Path, payload: dict) -> None:
    """`out/report.html` (figure first, then the tables) and `out/report.md` (the same tables)."""
    tables = report_tables(payload)
    lines = [decision_line(payload["meta"]), *meta_lines(payload["meta"])]
    (out / "report.html").write_text(render_html(payload, lines, tables), encoding="utf-8")
    (out / "report.md").write_text(render_markdown(payload, lines, tables), encoding="utf-8")


def number(value: float | None, digits: int = 3, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def gain_text(gain: dict | None) -> str:
    if not gain or gain.get("gain") is None:
        return "not measured"
    interval = ("" if gain.get("low") is None or gain.get("high") is None
                else f" [{number(gain['low'], sign=True)}, {number(gain['high'], sign=True)}]")
    return number(gain["gain"], sign=True) + interval


def decision_line(meta: dict) -> str:
    return (f"Chosen: {meta.get('chosen') or 'none'}. Saved: {meta.get('saved') or 'nothing'}. "
            f"Why: {meta.get('why') or '-'}")


def meta_lines(meta: dict) -> list[str]:
    identity = ", ".join(f"{k}={v}" for k, v in (meta.get("lm_identity") or {}).items()) or "not recorded"
    args = ", ".join(f"{k}={v}" for k, v in (meta.get("args") or {}).items()) or "none"
    interval = meta.get("interval")
    return [
        f"LM: {meta.get('lm')}; identity: {identity}.",
        f"Model calls: {meta.get('model_calls', '-')}"
        + (f"; calls the engine failed (no reply; the error is in the transcript): {meta['failed_calls']}"
           if meta.get("failed_calls") else "") + "; exact repeats served from the run's transcript: "
        f"{meta.get('repeats_served', '-')}; replies served from the reply cache of earlier runs: "
        f"{meta.get('cached_served', '-')} ({meta.get('cache_ignored', '-')} kept replies ignored, unreadable or "
        f"damaged)" + (f"; requests the replayed transcript did not hold: {meta['unrecorded']}"
                       if meta.get("unrecorded") else "") + ".",
        f"Wall time: {number(meta.get('wall_seconds'), 0)} s on {meta.get('cores', '-')} cores.",
        f"Cases: {meta.get('train_cases', '-')} training, {meta.get('held_out_cases', '-')} held out; "
        f"demo budget k={meta.get('k', '-')}.",
        f"Gain: held-out mean score minus the uncompiled program's, on the same cases; "
        f"{'-' if interval is None else f'{interval:.0%}'} paired bootstrap interval over "
        f"{meta.get('resamples', '-')} resamples.",
        f"Arguments: {args}.",
        recording_text(meta),
    ]


def recording_text(meta: dict) -> str:
    """How the run's evidence was recorded, and for a rescore, whose replies it scored."""
    recording = meta.get("recording") or {}
    order = ("each case's refs in an order of its own" if recording.get("shuffled_refs")
             else "the refs in the order the tools return them")
    lookups = ("with" if recording.get("named_alert_lookups") else "without") + " the named-alert lookups diagnose() adds"
    text = f"Evidence: {order}, {lookups}."
    if recording.get("shuffled_refs") and recording.get("reordered_translations"):
        text += " Each demo's translation is shown on the same calls with each output list reversed."
    if meta.get("rescored_from"):
        text += (f" Re-scored: the replies recorded in {meta['rescored_from']}, each matched to its case by its "
                 "question and observations, scored under this code's metric; no model was called.")
    return text


def report_tables(payload: dict) -> list[Table]:
    guarded = [guard_table(payload["meta"]["guard"])] if payload["meta"].get("guard") else []
    return [summary_table(payload), *guarded, parts_table(payload), correlation_table(payload),
            analysis_table(payload), case_table(payload)]


def guard_table(guard: dict) -> Table:
    """The whole diagnoses asked before a save, each question's verdict under both programs."""
    both: dict[str, dict] = {}
    for row in guard["rows"]:
        both.setdefault(row["id"], {"set": row["set"]})[row["program"]] = row

    def said(row: dict | None) -> str:
        if row is None:
            return "-"
        return f"{row['verdict']}, {'right' if row['right'] else 'wrong'}" + (
            ", wrong PASS" if row.get("wrong_pass") else "")

    rows = [[qid, pair["set"], said(pair.get("uncompiled")), said(pair.get("candidate"))] for qid, pair in both.items()]
    refused = {*guard["lost"], *guard["wrong_passes"], *guard["failed"]}
    marked = frozenset((i, 3) for i, qid in enumerate(both) if qid in refused)
    verdict = "saved" if guard["holds"] else "not saved"
    return Table("Whole diagnoses before saving", ["question", "set", "uncompiled", "candidate"], rows,
                 intro=(f"The chosen candidate qualified on the devset, so it and the uncompiled program were each asked "
                        f"the whole-pipeline questions of {', '.join(guard['sets'])} (devset/questions.py) before "
                        f"saving: {guard['summary']}. It is {verdict}: a candidate is saved only when it loses no "
                        "question the uncompiled program got right, gives no wrong PASS, and no diagnosis raised."),
                 widths=(34, 10, 28, 28), marked=marked)


def summary_table(payload: dict) -> Table:
    rows = [[row["label"], row["kind"], number(row.get("train")), number(row.get("held_out")),
             number(row.get("held_out_first_attempt")),
             number(row.get("train_normalised")), number(row.get("held_out_normalised")),
             gain_text(row.get("gain")), str((row.get("gain") or {}).get("cases", "-")),
             number(row.get("compile_seconds"), 0), row.get("note") or ""] for row in payload["rows"]]
    return Table("Summary", ["program", "kind", "train", "held-out", "held-out, first attempt", "train normalised",
                             "held-out normalised", "held-out gain [interval]", "cases", "compile s", "note"], rows,
                 intro=normalised_text(payload) + (
                     " A program is scored as a diagnosis runs it: when code refuses a claim a new attempt can "
                     "fix, the citation step is asked once more, told why, and the attempt the checks score "
                     "higher is used; the first attempt's own score is beside it."),
                 numeric=frozenset({2, 3, 4, 5, 6, 8, 9}),
                 widths=(11, 8, 6, 6, 6, 8, 8, 12, 5, 6, 24))


def normalised_text(payload: dict) -> str:
    """What a normalised score is, with the floors and ceilings of this run's cases."""
    bounds = {name: sorted({run[name] for run in payload.get("runs") or [] if run.get(name) is not None})
              for name in ("floor", "ceiling")}
    if not bounds["floor"]:
        return "This run's results record no floor or ceiling per case, so no score is normalised."

    def span(values: list[float]) -> str:
        return number(values[0]) if len(values) == 1 else f"{number(values[0])} to {number(values[-1])}"

    return ("Normalised: a case's score minus its floor, over its ceiling minus its floor, and the row's mean "
            "of those; the floor is what an output with no claim scores on the case "
            f"({span(bounds['floor'])} here), the ceiling what its gold output scores ({span(bounds['ceiling'])}). "
            "The gain is in raw score.")


def parts_table(payload: dict) -> Table:
    parts = payload.get("parts") or {}
    names, weights, means = parts.get("names") or [], parts.get("weights") or {}, parts.get("means") or {}
    rows = [[row["label"], *(number((means.get(row["label"]) or {}).get(name)) for name in names)]
            for row in payload["rows"]]
    head = ["program", *(f"{name} (weight {number(weights.get(name), 2)})" for name in names)]
    return Table("Metric parts, held-out mean per row", head, rows,
                 numeric=frozenset(range(1, len(names) + 1)))


def correlation_table(payload: dict) -> Table:
    correlation = payload.get("correlation") or {}
    names, matrix = correlation.get("names") or [], correlation.get("matrix") or []
    same = {frozenset((pair["a"], pair["b"])) for pair in correlation.get("same_bit") or []}
    marked = frozenset((i, j + 1) for i, a in enumerate(names) for j, b in enumerate(names)
                       if a != b and frozenset((a, b)) in same)
    rows = [[name, *(number(value, 2) for value in (matrix[i] if i < len(matrix) else []))]
            for i, name in enumerate(names)]
    flagged = "; ".join(f"{pair['a']} and {pair['b']} agree on {number(pair.get('agreement'), 3)} of runs"
                        for pair in correlation.get("same_bit") or [])
    constant = ", ".join(correlation.get("constant") or []) or "none"
    intro = (f"Pearson correlation of the parts over {correlation.get('runs', '-')} scored runs. "
             f"(Nearly) the same bit, flagged: {flagged or 'no pair'}. Constant on this run: {constant}.")
    return Table("Correlation of the metric parts", ["part", *names], rows, intro=intro,
                 numeric=frozenset(range(1, len(names) + 1)), marked=marked)


def analysis_table(payload: dict) -> Table:
    rows = [[item["case_id"], item.get("kind") or "", item.get("why") or ""] for item in payload.get("analysis") or []]
    return Table("Per-case analysis", ["case", "kind", "why"], rows, widths=(22, 14, 64))


def case_table(payload: dict) -> Table:
    rows = []
    for run in payload.get("runs") or []:
        verdict = run.get("verdict") or "-"
        if run.get("expected_verdict") and run["expected_verdict"] != verdict:
            verdict += f", expected {run['expected_verdict']}"
        lost = ", ".join(f"{name} {number(value, 2)}" for name, value in (run.get("parts") or {}).items()
                         if value is not None and value < 1)
        served = ", repeat" if run.get("repeat") else ", cached" if run.get("cached") else ""
        calls = str(run.get("lm_calls", "-")) + served
        rows.append([run["label"], run["case_id"], run.get("family") or "", run.get("split") or "",
                     number(run.get("score")), number(run.get("normalised")), verdict, run.get("gatekeeper") or "",
                     ", ".join(run.get("rules") or []) or "-", lost or "-", calls,
                     number(run.get("seconds"), 1), run.get("feedback") or ""])
    head = ["program", "case", "family", "split", "score", "normalised", "verdict", "gatekeeper", "rules",
            "parts below 1", "LM calls", "s", "feedback"]
    return Table("Per case", head, rows, numeric=frozenset({4, 5, 11}),
                 widths=(9, 15, 8, 5, 4, 5, 8, 7, 12, 9, 4, 3, 11), folded=12)


def render_html(payload: dict, lines: list[str], tables: list[Table]) -> str:
    environment = jinja2.Environment(loader=jinja2.PackageLoader("optimization", "templates"), autoescape=True,
                                     undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    figure = gain_figure(payload["rows"], payload["meta"].get("interval"))
    return environment.get_template("report.html").render(
        meta=payload["meta"], lines=lines, tables=tables, figure=figure, fold_at=FOLD_AT)


def markdown_cell(text: str) -> str:
    """Text on one line for a Markdown table cell or list item: no HTML tag, no cell-splitting pipe,
    no link (every link and image opens with a bracket)."""
    text = re.sub(r"\s+", " ", str(text)).strip()
    text = html.escape(text, quote=False)
    return re.sub(r"([\\|\[])", r"\\\1", text)


def markdown_table(table: Table) -> list[str]:
    def cell(i: int, j: int, text: str) -> str:
        return f"**{markdown_cell(text)}**" if (i, j) in table.marked else markdown_cell(text)

    lines = [f"## {markdown_cell(table.title)}", ""]
    if table.intro:
        lines += [markdown_cell(table.intro), ""]
    lines += ["| " + " | ".join(map(markdown_cell, table.head)) + " |",
              "|" + "".join(" ---: |" if j in table.numeric else " --- |" for j in range(len(table.head)))]
    lines += ["| " + " | ".join(cell(i, j, text) for j, text in enumerate(row)) + " |"
              for i, row in enumerate(table.rows)]
    return lines + [""]


def render_markdown(payload: dict, lines: list[str], tables: list[Table]) -> str:
    figure = [f"- {markdown_cell(row['label'] + ' (' + row['kind'] + '): ' + gain_text(row.get('gain')))}"
              for row in payload["rows"] if row["kind"] != "uncompiled"]
    md = [f"# Optimization run {markdown_cell(payload['meta'].get('run_id'))}", "",
          "## Held-out gain over the uncompiled program", "",
          "The figure is in report.html; its numbers:", "", *figure, "", "## Run", "",
          *(f"- {markdown_cell(line)}" for line in lines), ""]
    for table in tables:
        md += markdown_table(table)
    return "\n".join(md)


@dataclass(frozen=True)
class Axis:
    """The figure's horizontal scale: gain `low`..`high` onto pixels `left`..`right`, ticks every `step`."""

    low: float
    high: float
    step: float
    left: float
    right: float

    @classmethod
    def around(cls, values: list[float], left: float, right: float) -> Axis:
        low, high = min([0.0, *values]), max([0.0, *values])
        span = high - low or 0.2
        step = next((s for s in TICK_STEPS if span / s <= 8), TICK_STEPS[-1])
        return cls(math.floor(low / step - 0.25) * step, math.ceil(high / step + 0.25) * step, step, left, right)

    def x(self, value: float) -> float:
        return self.left + (value - self.low) / (self.high - self.low) * (self.right - self.left)

    def ticks(self) -> list[float]:
        count = round((self.high - self.low) / self.step)
        return [round(self.low + i * self.step, 6) for i in range(count + 1)]


def gain_figure(rows: list[dict], interval: float | None = None) -> Markup:
    """Inline SVG, no script: one line per candidate and reference row, its gain a point and its
    interval an error bar on a shared axis, with the uncompiled program as the zero line."""
    shown = [r for r in rows if r["kind"] == "candidate"] + [r for r in rows if r["kind"] == "reference"]
    width, label_width, value_width, row_height, top = 1300, 400, 220, 30, 48
    values = [v for r in shown for v in ((r.get("gain") or {}).get(k) for k in ("gain", "low", "high"))
              if isinstance(v, (int, float)) and math.isfinite(v)]
    axis = Axis.around(values, label_width, width - value_width)
    bottom = top + row_height * max(len(shown), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{bottom + 64}" '
             f'viewBox="0 0 {width} {bottom + 64}" role="img" font-family="sans-serif" font-size="13" '
             f'aria-label="held-out gain over the uncompiled program per row, with its interval">',
             *figure_legend(label_width), *figure_axis(axis, top, bottom, interval)]
    for i, row in enumerate(shown):
        parts += figure_row(row, axis, top + row_height * i + row_height / 2, label_width)
        if row["kind"] == "candidate" and i + 1 < len(shown) and shown[i + 1]["kind"] == "reference":
            y = top + row_height * (i + 1)
            parts.append(f'<line x1="24" y1="{y}" x2="{width - 24}" y2="{y}" stroke="#999" stroke-dasharray="4 4"/>')
    return Markup("".join(parts) + "</svg>")


def figure_legend(left: float) -> list[str]:
    return [f'<circle cx="{left + 6}" cy="16" r="5" fill="{CANDIDATE_COLOUR}"/>'
            f'<text x="{left + 16}" y="20">candidate (compiled)</text>',
            f'<path d="M {left + 186} 10 l 6 6 l -6 6 l -6 -6 z" fill="white" stroke="{REFERENCE_COLOUR}" '
            f'stroke-width="2"/><text x="{left + 198}" y="20">reference (rule, gold outputs, best per case)</text>']


def figure_axis(axis: Axis, top: float, bottom: float, interval: float | None) -> list[str]:
    parts = [f'<line class="axis" x1="{axis.left}" y1="{bottom}" x2="{axis.right}" y2="{bottom}" stroke="#333"/>']
    for tick in axis.ticks():
        x = axis.x(tick)
        parts.append(f'<line x1="{x:.2f}" y1="{top - 6}" x2="{x:.2f}" y2="{bottom}" stroke="#e4e4e4"/>'
                     f'<text class="tick" x="{x:.2f}" y="{bottom + 18}" text-anchor="middle">{tick_text(tick)}</text>')
    zero = axis.x(0.0)
    parts.append(f'<line class="zero" x1="{zero:.2f}" y1="{top - 6}" x2="{zero:.2f}" y2="{bottom}" '
                 f'stroke="#000" stroke-width="1.5"/>'
                 f'<text x="{zero:.2f}" y="{top - 12}" text-anchor="middle" font-size="12">uncompiled</text>')
    parts.append(f'<text x="{(axis.left + axis.right) / 2:.0f}" y="{bottom + 44}" text-anchor="middle">'
                 f'held-out gain over the uncompiled program (the zero line); error bar: its '
                 f'{"" if interval is None else f"{interval:.0%} "}bootstrap interval</text>')
    return parts


def shortened(text: str, room: int) -> str:
    """`text` cut to `room` columns with an ellipsis, a wide (CJK) character taking two."""
    columns = [2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text]
    if sum(columns) <= room:
        return text
    used, end = 1, 0
    while used + columns[end] <= room:
        used, end = used + columns[end], end + 1
    return text[:end] + "…"


def tick_text(tick: float) -> str:
    return "0" if tick == 0 else f"{tick:+.2f}"


def figure_row(row: dict, axis: Axis, y: float, label_width: float) -> list[str]:
    label = row["label"]
    short = shortened(label, LABEL_CHARS)
    colour = CANDIDATE_COLOUR if row["kind"] == "candidate" else REFERENCE_COLOUR
    gain = row.get("gain") or {}
    parts = [f'<text x="{label_width - 12}" y="{y + 4:.1f}" text-anchor="end"><title>{html.escape(label)}</title>'
             f'{html.escape(short)}</text>',
             f'<text x="{axis.right + 12}" y="{y + 4:.1f}">{html.escape(gain_text(gain))}</text>']
    if gain.get("low") is not None and gain.get("high") is not None:
        x1, x2 = axis.x(gain["low"]), axis.x(gain["high"])
        parts.append(f'<line class="interval" data-row="{html.escape(label)}" x1="{x1:.2f}" y1="{y:.1f}" '
                     f'x2="{x2:.2f}" y2="{y:.1f}" stroke="{colour}" stroke-width="2"/>'
                     f'<path d="M {x1:.2f} {y - 6:.1f} v 12 M {x2:.2f} {y - 6:.1f} v 12" stroke="{colour}" '
                     f'stroke-width="2"/>')
    if gain.get("gain") is not None:
        x = axis.x(gain["gain"])
        marker = (f'<circle class="point" cx="{x:.2f}" cy="{y:.1f}" r="6" fill="{colour}"/>'
                  if row["kind"] == "candidate" else
                  f'<path class="point" d="M {x:.2f} {y - 7:.1f} l 7 7 l -7 7 l -7 -7 z" fill="white" '
                  f'stroke="{colour}" stroke-width="2"/>')
        parts.append(marker)
    return parts
