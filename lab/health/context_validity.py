"""Does a context measure read the context? Paired validation on documentation nobody here wrote.

A validation item is a documented function F: one question about F, asked (i) after F's own
docstring (the relevant context) and (ii) after another function's docstring of the same
length within 5 % (the irrelevant one). Relevance comes from the documentation's structure,
not from anyone here. A measure that reads the context ranks the relevant prompt of a pair
above the irrelevant one (after orienting it by the direction chosen on the selection set).

Figures (:func:`validity_figures`), each over the n pairs:

* paired AUROC: the share of pairs whose relevant prompt scores above the irrelevant one
  (ties count 1/2), with a percentile bootstrap interval over pairs (functions);
* the same for a **length-only** score (the context's token count) and for a **placebo**
  (the measure with each pair's labels swapped by a fair coin, fixed seed): both must stay
  near 0.5, else the check reads length or the pairing, not relevance ("The Illusion of
  Progress", 2025: length heuristics rival published detectors);
* Spearman's rho of the measure with the context's token count over the relevant prompts
  (a measure that reads length drifts with it);
* the share of prompts at either end of the measure's scale.

The bar (:data:`BAR`), fixed before the first validation run and stated in ``docs/design.md``:
AUROC >= 0.75, length-only and placebo AUROC within 0.1 of 0.5, |rho| <= 0.2, end share <= 5 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy import stats

from lab.kinds.validate_context import FITTED_HERE, Figures, Reference, Validation
from lab.verdicts import NOT_SUPPORTED, SUPPORTED, meets_bars

MIN_AUROC = 0.75
NEAR_HALF = 0.10
MAX_LENGTH_RHO = 0.20
MAX_END_SHARE = 0.05
N_BOOT = 2000
BAR = (f"paired AUROC >= {MIN_AUROC}; length-only and shuffled-label placebo AUROC within {NEAR_HALF} of 0.5; "
       f"|Spearman rho(measure, context tokens)| <= {MAX_LENGTH_RHO} on the relevant prompts; "
       f"at most {MAX_END_SHARE:.0%} of prompts at either end of the scale")


def paired_auroc(relevant: Sequence[float], irrelevant: Sequence[float]) -> float:
    """Share of pairs whose relevant score is above the irrelevant one, ties counting 1/2.

    Args:
        relevant, irrelevant: One finite score per pair, same length n >= 1.

    Returns:
        The paired AUROC in [0, 1].

    Raises:
        ValueError: lengths differ, no pair, or a score is not finite.

    Examples:
        >>> paired_auroc([2.0, 1.0, 3.0], [1.0, 1.0, 4.0])
        0.5
    """
    r, i = np.asarray(relevant, dtype=float), np.asarray(irrelevant, dtype=float)
    if r.shape != i.shape or r.ndim != 1 or r.size == 0:
        raise ValueError(f"need two equal non-empty score lists, got {r.size} and {i.size}")
    if not (np.isfinite(r).all() and np.isfinite(i).all()):
        raise ValueError("every score must be finite")
    return float(np.mean((r > i) + 0.5 * (r == i)))


def _boot_interval(wins: np.ndarray, seed: int, n_boot: int) -> tuple[float, float]:
    """95 % percentile interval of the mean of ``wins`` (per-pair 1, 1/2, 0) over resampled pairs."""
    gen = np.random.default_rng(seed)
    means = wins[gen.integers(0, wins.size, size=(n_boot, wins.size))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def at_ends(values: Sequence[float], low: float, high: float, tol: float = 1e-9) -> float:
    """Share of ``values`` within ``tol`` of ``low`` or ``high`` (``high`` may be ``inf``: never reached)."""
    v = np.asarray(values, dtype=float)
    return float(np.mean((np.abs(v - low) <= tol) | (np.abs(v - high) <= tol))) if v.size else math.nan


def failed_bars(auroc: float, length_auroc: float, placebo: float, rho: float, ends: float) -> tuple[str, ...]:
    """The bars of :data:`BAR` these figures miss, each in words (empty: they pass)."""
    return tuple(name for name, ok in (
        (f"AUROC {auroc:.2f} < {MIN_AUROC}", auroc >= MIN_AUROC),
        (f"length-only AUROC {length_auroc:.2f} not within {NEAR_HALF} of 0.5", abs(length_auroc - 0.5) <= NEAR_HALF),
        (f"placebo AUROC {placebo:.2f} not within {NEAR_HALF} of 0.5", abs(placebo - 0.5) <= NEAR_HALF),
        (f"|rho(length)| {abs(rho):.2f} > {MAX_LENGTH_RHO}" if math.isfinite(rho) else
         "rho(length) undefined (the measure or the context length is the same on every relevant prompt)",
         math.isfinite(rho) and abs(rho) <= MAX_LENGTH_RHO),
        (f"{ends:.0%} at the scale's ends > {MAX_END_SHARE:.0%}", ends <= MAX_END_SHARE)) if not ok)


def validity_figures(measure: str, relevant: Sequence[float], irrelevant: Sequence[float],
                     n_relevant: Sequence[int], n_irrelevant: Sequence[int], *, direction: int = 1,
                     scale: tuple[float, float] = (0.0, math.inf), seed: int = 0,
                     n_boot: int = N_BOOT) -> Figures:
    """A measure's figures against :data:`BAR` on n pairs.

    Args:
        measure: Its name (for the record).
        relevant, irrelevant: Its value on each pair's relevant and irrelevant prompt (finite).
        n_relevant, n_irrelevant: Each context's length in tokens.
        direction: +1 if higher means relevant, -1 if lower does (chosen on the selection set).
        scale: The measure's range; values at either end count toward ``end_share``.
        seed: Seed of the bootstrap and of the placebo's coin.
        n_boot: Bootstrap resamples.

    Returns:
        The kind's :class:`lab.kinds.validate_context.Figures`: the paired AUROC (oriented) and its 95 % bootstrap
        interval over pairs, the length-only and placebo AUROCs, Spearman rho of the measure with context tokens
        over the relevant prompts (NaN where undefined: null in the file), the share of all 2n prompts at either
        end of the scale, and the bars missed (:func:`failed_bars`).

    Raises:
        ValueError: unequal lengths, fewer than 3 pairs, a non-finite value or a direction not +-1.
    """
    if direction not in (1, -1):
        raise ValueError(f"direction={direction!r} must be 1 or -1")
    n = len(relevant)
    if n < 3 or not len(irrelevant) == len(n_relevant) == len(n_irrelevant) == n:
        raise ValueError(f"need at least 3 pairs with every list of one length, got {n}, {len(irrelevant)}, "
                         f"{len(n_relevant)}, {len(n_irrelevant)}")
    r, i = direction * np.asarray(relevant, dtype=float), direction * np.asarray(irrelevant, dtype=float)
    auroc = paired_auroc(r, i)
    wins = (r > i) + 0.5 * (r == i)
    low, high = _boot_interval(wins, seed, n_boot)
    length_auroc = paired_auroc(n_relevant, n_irrelevant)
    swap = np.random.default_rng(seed + 1).random(n) < 0.5
    placebo = paired_auroc(np.where(swap, i, r), np.where(swap, r, i))
    rho = (float(stats.spearmanr(relevant, n_relevant).statistic)  # constant input: undefined, not a warning
           if np.ptp(relevant) > 0 and np.ptp(n_relevant) > 0 else math.nan)
    ends = at_ends(list(relevant) + list(irrelevant), *scale)
    failed = failed_bars(auroc, length_auroc, placebo, rho, ends)
    return Figures(measure=measure, direction=direction, n_pairs=n, auroc=auroc, ci_low=low, ci_high=high,
                   length_auroc=length_auroc, placebo_auroc=placebo, length_rho=rho, end_share=ends, failed=failed)


# --- the chosen measure: lookback heads, referenced to length ------------------------------------------------

NEW_TOKENS = 24  # the greedy continuation each prompt is scored on (validate-context's --new-tokens default)
HEADS = 8  # heads kept; fixed before validation (leave-one-out on the selection set: 0.80 at 8, 0.83 at 4, 0.82 at 16)
CHOSEN = "lookback_heads"
CHOSEN_RULE = (f"the Lookback-Lens ratio (Chuang et al. 2024) averaged over the {HEADS} (layer, head) pairs with the "
               "largest paired AUROC on the selection set (lab/data/context_selection.jsonl), minus the OLS line of "
               "that average on ln(context tokens) over the selection set's prompts (both contexts of every pair); "
               "higher = the decode reads the context more, for its length; fitted per model on the selection set "
               "only, then judged once on the validation set against the bar")


class HeadReference(Reference):
    """A model's fitted lookback-heads measure (:data:`CHOSEN_RULE`): the kept ``(layer, head)`` pairs, best first,
    the length line ``intercept + slope * ln(context tokens)`` subtracted, the selection pairs it was fitted on and
    its leave-one-out paired AUROC there (heads and line refitted without each pair); its fields are
    :class:`lab.kinds.validate_context.Reference`'s, declared once.
    """

    def check_shape(self, n_layers: int, n_heads: int) -> None:
        """Refuse a reference whose kept heads the model (``n_layers`` x ``n_heads``) does not have.

        Raises:
            ValueError: naming the first such head and the model's shape.
        """
        for layer, head in self.heads:
            if not (0 <= layer < n_layers and 0 <= head < n_heads):
                raise ValueError(f"its kept head (layer {layer}, head {head}) is not in the model's {n_layers} "
                                 f"layers x {n_heads} heads (fitted for another model?)")

    def score(self, per_head: Sequence[Sequence[float]], n_context: int) -> float:
        """The measure of one prompt from its per-head lookback ratios ``[L][H]`` and its context length.

        Raises:
            ValueError: a kept head outside ``per_head``, or ``n_context < 1``.
        """
        if n_context < 1:
            raise ValueError(f"n_context={n_context} must be >= 1")
        try:
            mean = sum(per_head[layer][head] for layer, head in self.heads) / len(self.heads)
        except IndexError:
            raise ValueError(f"a kept head of {list(self.heads)} is outside the model's {len(per_head)} layers x "
                             f"{len(per_head[0]) if len(per_head) else 0} heads") from None
        return float(mean - (self.intercept + self.slope * math.log(n_context)))


def _fit(rel: np.ndarray, irr: np.ndarray, n_rel: np.ndarray, n_irr: np.ndarray, k: int) -> tuple[list, float, float]:
    """Heads (flat indices, best first) and the length line from ``[n, L*H]`` ratios and lengths."""
    auroc = ((rel > irr) + 0.5 * (rel == irr)).mean(0)
    top = list(np.argsort(-auroc, kind="stable")[:k])
    x = np.log(np.concatenate([n_rel, n_irr]).astype(float))
    y = np.concatenate([rel[:, top].mean(1), irr[:, top].mean(1)])
    slope, intercept = np.polyfit(x, y, 1) if np.ptp(x) > 0 else (0.0, float(y.mean()))
    return top, float(intercept), float(slope)


def fit_head_reference(relevant: np.ndarray, irrelevant: np.ndarray, n_relevant: Sequence[int],
                       n_irrelevant: Sequence[int], k: int = HEADS) -> HeadReference:
    """Fit :data:`CHOSEN_RULE` on selection pairs.

    Args:
        relevant, irrelevant: float ``[n, L, H]`` per-head lookback ratios of each pair's two prompts.
        n_relevant, n_irrelevant: Context tokens of each.
        k: Heads kept.

    Returns:
        :class:`HeadReference`, with its leave-one-out AUROC.

    Raises:
        ValueError: fewer than 3 pairs, shapes that differ, or k outside [1, L*H].
    """
    rel, irr = np.asarray(relevant, dtype=float), np.asarray(irrelevant, dtype=float)
    if rel.ndim != 3 or rel.shape != irr.shape or rel.shape[0] < 3:
        raise ValueError(f"need two [n >= 3, L, H] arrays of one shape, got {rel.shape} and {irr.shape}")
    n, n_layers, n_heads = rel.shape
    if not 1 <= k <= n_layers * n_heads:
        raise ValueError(f"k={k} must be in [1, {n_layers * n_heads}]")
    rel, irr = rel.reshape(n, -1), irr.reshape(n, -1)
    nr, ni = np.asarray(n_relevant, dtype=float), np.asarray(n_irrelevant, dtype=float)
    wins = []
    for i in range(n):  # leave-one-out: the pair scored by heads and a line fitted without it
        keep = np.arange(n) != i
        top, c, b = _fit(rel[keep], irr[keep], nr[keep], ni[keep], k)
        r, s = rel[i, top].mean() - b * math.log(nr[i]), irr[i, top].mean() - b * math.log(ni[i])
        wins.append((r > s) + 0.5 * (r == s))
    top, intercept, slope = _fit(rel, irr, nr, ni, k)
    return HeadReference(heads=tuple(divmod(int(t), n_heads) for t in top), intercept=intercept, slope=slope,
                         n_pairs=n, loo_auroc=float(np.mean(wins)))


def reference_path(profile: str, *, packaged: bool) -> Path:
    """Where a model's fitted context measure lives: ``lab/health/context/<profile>.json`` in the package, or
    ``<calibration dir>/health/context/<profile>.json`` (:func:`lab.user_dirs.calibration_dir`) for the user's."""
    from lab.user_dirs import packaged_file, user_file

    return (packaged_file if packaged else user_file)(f"health/context/{profile}.json")


@dataclass(frozen=True)
class ContextVerdict:
    """A fitted measure's figures on one judged set, kept in its reference file beside it.

    Attributes:
        set_name: ``validation`` or ``heldback``.
        items_file: The pairs judged (a packaged set by its ``lab/data/`` name).
        report: The ``lab validate-context`` report folder the figures come from.
        figures: The chosen measure's figures there (:func:`validity_figures`).
    """

    set_name: str
    items_file: str
    report: str
    figures: Figures

    def line(self) -> str:
        """One line: the verdict with its figures (AUROC, interval, controls, drift, failed bars)."""
        f = self.figures
        rho = f"{f.length_rho:+.2f}" if math.isfinite(f.length_rho) else "undefined"
        # The verdict (lab.verdicts.meets_bars) in the record's words, which the study's gate quotes (unmeasurable).
        head = {SUPPORTED: "passes", NOT_SUPPORTED: f"fails ({'; '.join(f.failed)})"}[meets_bars(f.passes)]
        return (f"{f.measure} {head} on {f.n_pairs} {self.set_name} pairs ({self.items_file}): AUROC {f.auroc:.2f} "
                f"[{f.ci_low:.2f}, {f.ci_high:.2f}], length-only {f.length_auroc:.2f}, placebo {f.placebo_auroc:.2f}, "
                f"rho(length) {rho}; report {self.report}")

    def to_json(self) -> dict:
        f = self.figures
        return {"items_file": self.items_file, "report": self.report, "n_pairs": f.n_pairs, "auroc": f.auroc,
                "ci_low": f.ci_low, "ci_high": f.ci_high, "length_auroc": f.length_auroc,
                "placebo_auroc": f.placebo_auroc, "length_rho": f.length_rho if math.isfinite(f.length_rho) else None,
                "end_share": f.end_share, "failed": list(f.failed)}

    @classmethod
    def from_json(cls, set_name: str, data: dict) -> "ContextVerdict":
        """The verdict as stored; its failed bars are judged again from the figures (a file whose ``failed``
        list says otherwise does not decide it)."""
        rho = math.nan if data["length_rho"] is None else float(data["length_rho"])
        fig = {k: float(data[k]) for k in ("auroc", "ci_low", "ci_high", "length_auroc", "placebo_auroc", "end_share")}
        failed = failed_bars(fig["auroc"], fig["length_auroc"], fig["placebo_auroc"], rho, fig["end_share"])
        figures = Figures(measure=CHOSEN, direction=1, n_pairs=int(data["n_pairs"]), length_rho=rho, failed=failed,
                          **fig)
        return cls(set_name=set_name, items_file=str(data["items_file"]), report=str(data["report"]), figures=figures)


VERDICT_SETS = ("validation", "heldback")  # the judged sets a reference file keeps


@dataclass(frozen=True)
class ContextMeasure:
    """A model's fitted context measure as read from its file, with the verdicts kept beside it.

    Attributes:
        profile: The model profile.
        reference: The heads and length line.
        path: The file read (the user's before the packaged one).
        selection_file, selection_report: Where it was fitted.
        verdicts: By set name (:data:`VERDICT_SETS`), those judged and saved.
    """

    profile: str
    reference: HeadReference
    path: Path
    selection_file: str
    selection_report: str
    verdicts: dict[str, ContextVerdict] = field(default_factory=dict)

    def unmeasurable(self) -> str | None:
        """Why the measure may not stand for the context on this model (the study's H1 gate), or None when
        it passed the bar on the validation set; the reason names the record's figures."""
        v = self.verdicts.get("validation")
        if v is None:
            return (f"{CHOSEN} has no validation record for {self.profile} in {self.path} (run lab validate-context "
                    f"--model {self.profile} --set validation --save)")
        if v.figures.passes:
            return None
        return f"{CHOSEN} does not read the context on {self.profile}: it {v.line().split(' ', 1)[1]}"


def _relative(path: str) -> str:
    """A packaged data file by its ``lab/data/`` name, any other path as given."""
    from importlib import resources

    data = Path(str(resources.files("lab"))) / "data"
    p = Path(path)
    return f"lab/data/{p.name}" if p.parent.resolve() == data.resolve() else path


def load_context_measure(profile: str) -> ContextMeasure | None:
    """The model's fitted context measure and its saved verdicts (the user's file before the packaged one),
    or None when neither exists.

    Raises:
        FileSchemaError: the file read is not a valid reference (one line naming it), or was fitted for
            another profile; a folder, FIFO or dangling link in the user's place is refused, never skipped.
    """
    from lab.schemas import FileSchemaError
    from lab.schemas.health import CONTEXT_REFERENCE_KIND, load_context_reference_file
    from lab.user_dirs import found_first

    path = found_first(reference_path(profile, packaged=False), reference_path(profile, packaged=True))
    if path is None:
        return None
    data = load_context_reference_file(path)
    if data["profile"] != profile:
        raise FileSchemaError(path, CONTEXT_REFERENCE_KIND, f"fitted for {data['profile']!r}, not {profile!r} "
                              f"(a copied file? fit it with lab validate-context --set selection --model {profile} "
                              "--save)")
    ref = HeadReference(heads=tuple((int(a), int(b)) for a, b in data["heads"]), intercept=float(data["intercept"]),
                        slope=float(data["slope"]), n_pairs=int(data["n_pairs"]), loo_auroc=float(data["loo_auroc"]))
    verdicts = {name: ContextVerdict.from_json(name, data[name]) for name in VERDICT_SETS if name in data}
    return ContextMeasure(profile=profile, reference=ref, path=Path(path), selection_file=str(data["selection_file"]),
                          selection_report=str(data["report"]), verdicts=verdicts)


def context_measure_record(model: str) -> dict:
    """The context measure of ``model`` as a report shows it: ``measure``, the ``file`` read (a packaged one by
    its ``lab/`` name), each saved verdict's line (``verdicts``) and ``unmeasurable``: why its values may not be
    read as the context (the validation verdict failed or is missing, or the model has no fitted measure:
    :meth:`ContextMeasure.unmeasurable`), None where it passed.

    Raises:
        FileSchemaError: the measure's file is bad (one line naming it).
    """
    from lab.models.profiles import PROFILES

    found = load_context_measure(model) if model in PROFILES else None
    if found is None:
        return {"measure": CHOSEN, "file": None, "verdicts": {},
                "unmeasurable": f"{model!r} has no fitted context measure ({CHOSEN}): fit and validate one with "
                                "lab validate-context --set selection --save, then --set validation --save"}
    packaged = reference_path(model, packaged=True)
    shown = f"lab/health/context/{packaged.name} (packaged)" if found.path == packaged else str(found.path)
    return {"measure": CHOSEN, "file": shown, "verdicts": {k: v.line() for k, v in found.verdicts.items()},
            "unmeasurable": found.unmeasurable()}


def load_reference(profile: str) -> tuple[HeadReference, Path] | None:
    """The model's fitted context measure and the file it came from (:func:`load_context_measure`), or None.

    Raises:
        FileSchemaError: as :func:`load_context_measure`.
    """
    found = load_context_measure(profile)
    return None if found is None else (found.reference, found.path)


def save_reference(ref: HeadReference, profile: str, selection_file: str, report: str,
                   verdicts: Sequence[ContextVerdict] = ()) -> Path:
    """Write ``ref`` (and the ``verdicts`` judged with it) atomically to the user's :func:`reference_path`,
    checked by the schema that reads it.

    Raises:
        FileSchemaError: a reference the lab would refuse to read back (nothing written).
        OSError: the file cannot be written.
    """
    from lab.runs.files import write_json_atomic
    from lab.schemas import validate
    from lab.schemas.health import CONTEXT_REFERENCE_KIND, CONTEXT_REFERENCE_SCHEMA

    path = reference_path(profile, packaged=False)
    data = {"profile": profile, "measure": CHOSEN, "heads": [list(h) for h in ref.heads], "intercept": ref.intercept,
            "slope": ref.slope, "n_pairs": ref.n_pairs, "loo_auroc": ref.loo_auroc,
            "selection_file": _relative(selection_file), "report": report,
            **{v.set_name: v.to_json() for v in verdicts}}
    validate(data, CONTEXT_REFERENCE_SCHEMA, path=path, kind=CONTEXT_REFERENCE_KIND)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data)
    return path


def save_verdict(measure: ContextMeasure, validation: "ContextValidation", report: str) -> Path:
    """Keep ``validation``'s figures beside the measure it judged: the measure's file, with this set's verdict
    added (an earlier one of the same set replaced), written to the user's :func:`reference_path`.

    Raises:
        ValueError: ``validation`` is not of a set in :data:`VERDICT_SETS`, or was judged with another measure.
        FileSchemaError, OSError: as :func:`save_reference`.
    """
    if validation.set_name not in VERDICT_SETS:
        raise ValueError(f"only the packaged sets' verdicts ({', '.join(VERDICT_SETS)}) are kept, not "
                         f"{validation.set_name!r}")
    if validation.reference != measure.reference:
        raise ValueError(f"the figures were judged with another fitted measure than {measure.path}")
    verdict = ContextVerdict(set_name=validation.set_name, items_file=_relative(validation.items_file), report=report,
                             figures=validation.chosen)
    kept = [v for name, v in measure.verdicts.items() if name != verdict.set_name] + [verdict]
    return save_reference(measure.reference, measure.profile, measure.selection_file, measure.selection_report, kept)


class ContextValidation(Validation):
    """One model's context measures on one paired set (:func:`context_validation`): the kind's
    :class:`lab.kinds.validate_context.Validation` (its fields declared once there), with :meth:`verdict`.
    ``reference`` is a :class:`HeadReference`, ``chosen`` and ``others`` hold NaN where the file holds null.
    """

    def verdict(self) -> str:
        """One line: whether the chosen measure passes the bar here, and why not."""
        where = f"{self.chosen.n_pairs} {self.set_name} pairs"
        if self.fitted_here:
            return (f"{CHOSEN} fitted on {where}: leave-one-out AUROC {self.reference.loo_auroc:.2f} "
                    f"(in-sample {self.chosen.auroc:.2f})")
        if self.chosen.passes:
            return (f"{CHOSEN} reads the context on {self.profile}: AUROC {self.chosen.auroc:.2f} "
                    f"[{self.chosen.ci_low:.2f}, {self.chosen.ci_high:.2f}] on {where}")
        return f"{CHOSEN} fails on {self.profile} ({where}): {'; '.join(self.chosen.failed)}"


def _side(scores: Sequence, name: str) -> tuple[list[float], list[float]]:
    return [getattr(s.relevant, name) for s in scores], [getattr(s.irrelevant, name) for s in scores]


def context_validation(scores: Sequence, *, profile: str, set_name: str, items_file: str,
                       reference: tuple[HeadReference, str] | None = None, seed: int = 0) -> ContextValidation:
    """Every measure's figures on scored pairs (:class:`lab.health.context_items.ItemScores`).

    Args:
        scores: The pairs' scores, each prompt with its per-head lookback ratios.
        profile, set_name, items_file: For the record.
        reference: ``(reference, where it came from)``; None fits it here (the selection set).
        seed: Seed of the bootstraps and placebos.

    Raises:
        ValueError: fewer than 3 pairs, or a prompt without per-head ratios.
    """
    if len(scores) < 3:
        raise ValueError(f"{items_file}: {len(scores)} pair(s); the figures need at least 3")
    n_rel, n_irr = _side(scores, "n_context")
    if reference is None:
        heads = [np.asarray(_side(scores, "lookback_per_head")[i], dtype=float) for i in (0, 1)]
        reference = (fit_head_reference(heads[0], heads[1], n_rel, n_irr), FITTED_HERE)
    ref = reference[0]
    chosen_rel = [ref.score(s.relevant.lookback_per_head, s.relevant.n_context) for s in scores]
    chosen_irr = [ref.score(s.irrelevant.lookback_per_head, s.irrelevant.n_context) for s in scores]
    chosen = validity_figures(CHOSEN, chosen_rel, chosen_irr, n_rel, n_irr, scale=(-math.inf, math.inf), seed=seed)
    others = []
    for name, scale in (("lookback", (0.0, 1.0)), ("contrast_bits", (0.0, math.inf)),
                        ("gain_bits", (-math.inf, math.inf)), ("health", (0.0, 10.0)), ("n_context", (0.0, math.inf))):
        rel, irr = _side(scores, name)
        keep = [i for i in range(len(rel)) if math.isfinite(rel[i]) and math.isfinite(irr[i])]
        if len(keep) < 3:
            continue
        for direction in (1, -1):
            others.append(validity_figures(name, [rel[i] for i in keep], [irr[i] for i in keep],
                                           [n_rel[i] for i in keep], [n_irr[i] for i in keep],
                                           direction=direction, scale=scale, seed=seed))
    rows = tuple({**{k: v for k, v in s.to_json().items() if not k.endswith("lookback_per_head")},
                  f"relevant_{CHOSEN}": a, f"irrelevant_{CHOSEN}": b}
                 for s, a, b in zip(scores, chosen_rel, chosen_irr))
    return ContextValidation(profile=profile, set_name=set_name, items_file=items_file, reference=ref,
                             reference_from=reference[1], chosen=chosen, others=tuple(others), rows=rows)
