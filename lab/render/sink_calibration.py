"""Rendering of ``lab calibrate-sinks``: the sweep table, summary.md, the candidates' figures and the sweep plot."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from lab.sinks.candidates import STATISTIC_LABEL


def _label(data: dict[str, Any]) -> str:
    """How the report's statistic reads ("sink rate" or "z"); a report without one is on the z scale."""
    return STATISTIC_LABEL.get(data.get("statistic"), "z")

def calibration_table(data: dict[str, Any]) -> Table:
    """Sweep rows around the feasible range: counts and rates per threshold."""
    t = Table(title=f"sink threshold calibration ({data['n_prompts']} prompts, "
                    f"{data['n_content_tokens']} content tokens); chosen: {data['chosen_threshold']}",
              title_justify="left")
    has_long = any(r.get("long_n_prompts") for r in data["sweep"])
    cols = ("rate" if data.get("statistic") == "sink_rate" else "z", "position 0", "content flagged", *(("long: pos 0", "long: content") if has_long else ()), "feasible")
    for col in cols:
        t.add_column(col, justify="right", no_wrap=True)
    for r in data["sweep"]:
        if r["threshold"] * 4 % 2 and not r["feasible"]:
            continue  # keep the table short: every 0.5 outside the feasible range
        long_cells = (f"{r['long_position0_flagged']}/{r['long_n_prompts']}",
                      f"{r['long_content_flagged']}/{r['long_n_content']}") if has_long else ()
        t.add_row(f"{r['threshold']:.2f}", f"{r['position0_flagged']}/{r['n_prompts']}",
                  f"{r['content_flagged']}/{r['n_content']} ({r['content_flagged'] / max(1, r['n_content']):.2%})",
                  *long_cells, "yes" if r["feasible"] else "")
    return t


def calibration_markdown(data: dict[str, Any]) -> str:
    feas, label = data["feasible_thresholds"], _label(data)
    lines = [
        "# Sink threshold calibration", "",
        f"- model: {data['model'].get('model')} ({data['model'].get('device')}, {data['model'].get('dtype')})",
        f"- prompts: {data['n_prompts']}; observed content tokens: {data['n_content_tokens']}",
        f"- criteria: position 0 flagged on >= {data['criteria']['position0_min_rate']:.0%} of prompts; "
        f"< {data['criteria']['content_max_rate']:.0%} of content tokens flagged",
        f"- feasible thresholds: {f'{min(feas):g} .. {max(feas):g}' if feas else 'none'}",
        f"- chosen (middle of the feasible range): **{data['chosen_threshold']}** "
        f"(current default: {data['current_default_threshold']})",
        f"- lowest position-0 {label}: {data['position0_score_min']:.2f}; highest content {label}: "
        f"{data['content_score_max'] if data['content_score_max'] is None else round(data['content_score_max'], 2)}",
    ]
    for p in data.get("long_prompts", []):
        lines.append(f"- long prompt `{p['id']}` ({p['n_tokens']} tokens): position-0 {label} "
                     f"{p['position0_score']:.2f}; highest content {label} {p['max_content_score']:.2f}; "
                     "at the chosen threshold "
                     f"{p['content_flagged_at_chosen']}/{p['n_content']} content tokens flagged, "
                     f"{p['trailing_flagged_at_chosen']} of them among the trailing positions (seen by < "
                     f"{data['trailing_fraction']:.0%} of the queries)")
    held = data.get("held_out")
    if held:
        h = held["short"]
        lines.append(f"- held-out set ({held['prompts']}) at {held['threshold']}: position 0 flagged on "
                     f"{h['position0_flagged']}/{h['n_prompts']} prompts; content {h['content_flagged']}/"
                     f"{h['n_content']} flagged")
        if held.get("long"):
            hl = held["long"]
            lines.append(f"- held-out long prompts ({', '.join(map(str, held['long_n_tokens']))} tokens): position 0 "
                         f"flagged on {hl['position0_flagged']}/{hl['n_prompts']}; content {hl['content_flagged']}/"
                         f"{hl['n_content']} flagged, {hl['trailing_flagged']} of them trailing")
    lines += ["", f"| {label} | position 0 flagged | content flagged | long: position 0 | long: content flagged "
                  "| feasible |",
              "|---:|---:|---:|---:|---:|:---:|"]
    lines += [f"| {r['threshold']:.2f} | {r['position0_flagged']}/{r['n_prompts']} | "
              f"{r['content_flagged']}/{r['n_content']} | {r.get('long_position0_flagged', 0)}/"
              f"{r.get('long_n_prompts', 0)} | {r.get('long_content_flagged', 0)}/{r.get('long_n_content', 0)} | "
              f"{'yes' if r['feasible'] else ''} |" for r in data["sweep"]]
    return "\n".join(lines) + "\n"


def plot_sweep(data: dict[str, Any], path) -> None:
    """Position-0 flag rate and content flag rate against the threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["threshold"] for r in data["sweep"]]
    p0 = [r["position0_flagged"] / r["n_prompts"] for r in data["sweep"]]
    ct = [r["content_flagged"] / max(1, r["n_content"]) for r in data["sweep"]]
    fig, ax = plt.subplots(figsize=(8, 4.5), constrained_layout=True)
    ax.plot(xs, p0, label="position 0 flagged (share of prompts)")
    ax.plot(xs, ct, label="content tokens flagged (share)")
    if any(r.get("long_n_prompts") for r in data["sweep"]):
        ax.plot(xs, [r["long_content_flagged"] / max(1, r["long_n_content"]) for r in data["sweep"]], ls="--",
                label="content tokens flagged, long prompts (share)")
    ax.axhline(data["criteria"]["position0_min_rate"], ls=":", color="grey")
    ax.axhline(data["criteria"]["content_max_rate"], ls=":", color="grey")
    if data["chosen_threshold"] is not None:
        ax.axvline(data["chosen_threshold"], color="black", lw=1,
                   label=f"chosen {_label(data)} = {data['chosen_threshold']}")
    ax.set_xlabel(f"{_label(data)} threshold")
    ax.set_ylabel("rate")
    ax.legend()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _counts(c: dict[str, Any], key: str) -> str:
    e = c["counts"].get(key)
    if not e:
        return ""
    return (f"{e['position0_flagged']}/{e['n_prompts']}; {e['content_flagged']}/{e['n_content']}"
            + (f" ({e['trailing_flagged']} trailing)" if key.endswith("long") else ""))


def candidates_markdown(data: dict[str, Any]) -> str:
    """Every candidate statistic on this model: feasible range, its own threshold, counts there."""
    lines = ["", "## Candidate statistics", "",
             f"The detector uses `{data['statistic']}`. Each candidate's threshold is the middle of its own feasible "
             "range on the calibration prompts (short and long). Counts: position 0 flagged / prompts; content "
             "tokens flagged / observed content tokens.", "",
             "| statistic | feasible | threshold | lowest pos-0 | highest content | calibration | calibration long | "
             "held-out | held-out long |", "|---|---|---:|---:|---:|---|---|---|---|"]
    for name, c in data["candidates"].items():
        feas = f"{c['feasible'][0]:g} .. {c['feasible'][1]:g}" if c["feasible"] else "none"
        high = "" if c["content_highest"] is None else f"{c['content_highest']:.2f}"
        lines.append(f"| {name} | {feas} | {'' if c['chosen'] is None else c['chosen']} | "
                     f"{c['position0_lowest']:.2f} | {high} | {_counts(c, 'calibration')} | "
                     f"{_counts(c, 'calibration_long')} | {_counts(c, 'held_out')} | {_counts(c, 'held_out_long')} |")
    cross = data.get("cross_model")
    if cross:
        lines += ["", f"Rule across the calibrated profiles ({', '.join(cross['profiles'])}): the first statistic "
                  f"feasible on all of them is **{cross['chosen']}**; a threshold feasible on all: "
                  f"{cross['default_threshold']}."]
    if data.get("saved_to"):
        lines += ["", f"Saved for the commands that read it (after this report): `{data['saved_to']}` "
                  "(the user's calibration folder, read before the packaged files)."]
    return "\n".join(lines) + "\n"
