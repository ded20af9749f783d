"""``lab study``: the pre-stated hypotheses over many prompts and their twins (``report.json``;
``study.json`` before format 1).

:class:`Report` is the report's shape past its kind and format, in the order :func:`lab.render.study.study_document`
writes it; each test of the family is a :class:`StudyTest` (``lab.analysis.hypotheses.TestResult`` as JSON: a value
that could not be computed, NaN, is written ``null``) with its power (:class:`Power`) among its details. The
parts no page reads (the settings, the machine, the descriptive tables) are kept as JSON values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from lab.kinds import Kind
from lab.provenance import StudyEnvironment
from lab.typed import from_json, may_be_absent
from lab.verdicts import VERDICTS

Verdict = Literal[VERDICTS]  # the one vocabulary's four words (lab.verdicts), no other


@dataclass(frozen=True)
class Power:
    """A test's power, as :func:`lab.analysis.power.power_summary` states it (``details["power"]`` of a test).

    Attributes:
        alpha: The per-test level the power is stated at: the family-wise alpha over the tests with a p-value.
        power: The target power (0.8).
        n: Units the power is stated on (prompts, pairs, questions: :attr:`unit`).
        unit: What ``n`` counts, in words.
        min_detectable: The smallest effect detectable at :attr:`power` with ``n``, in the test's effect's unit;
            None where it could not be computed (too little data).
        smallest_effect: The smallest effect of interest, in the same unit.
        underpowered: Whether ``min_detectable`` exceeds ``smallest_effect``; None where it is not known.
        n_needed: Units that would detect ``smallest_effect`` at :attr:`power`; None where not computable.
    """

    alpha: float
    power: float
    n: int
    unit: str
    min_detectable: float | None
    smallest_effect: float | None
    underpowered: bool | None
    n_needed: int | None


@dataclass(frozen=True)
class StudyTest:
    """One pre-stated hypothesis test of the family (:class:`lab.analysis.hypotheses.TestResult` as JSON).

    Attributes:
        name: The hypothesis' key (``"H1"`` ... ``"H6c"``).
        hypothesis: The pre-stated hypothesis, in words.
        test: The test used, in words.
        effect_name: What ``effect`` is (``"spearman_rho"``, ``"rank_biserial_r"``, ``"variance_gap"`` ...).
        effect: The effect size, in the unit ``effect_name`` names (a correlation: dimensionless, in [-1, 1]);
            None where it could not be computed.
        ci_low: The lower end of its interval at ``ci_level``, same unit; None where there is none.
        ci_high: The upper end, same unit; None where there is none.
        p_value: The raw two-sided p-value, in [0, 1]; None where the test did not run.
        n: Observations the test used (prompts, tokens or pairs).
        predicted_sign: +1 or -1, the direction of ``effect`` the hypothesis predicts.
        smallest_effect: The smallest effect of interest (the "not supported" rule), in the effect's unit.
        p_holm: The Holm-corrected p-value within the family, in [0, 1]; None where the test has no p-value.
        verdict: One of :data:`lab.verdicts.VERDICTS`, as the study judged it.
        note: Why the test could not run, or a caveat (the power sentence of an inconclusive one).
        details: Extra figures, different for each test (a placebo, the pairwise table of H3 ...), and
            ``"power"``: the test's :class:`Power` (read through :attr:`power`).
        ci_level: The interval's confidence level, in [0, 1] (the family's Bonferroni level).
        untestable: Why the test cannot decide on this study at any n (``""`` when it can); None in a report
            written before tests carried it (the reason then only in ``note``: :func:`lab.verdicts.untestable_reason`).
    """

    name: str
    hypothesis: str
    test: str
    effect_name: str
    effect: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n: int
    predicted_sign: int
    smallest_effect: float | None
    p_holm: float | None
    verdict: Verdict
    note: str
    details: dict[str, Any]
    ci_level: float
    untestable: str | None = may_be_absent()

    @property
    def power(self) -> Power | None:
        """``details["power"]`` as a :class:`Power`; None where the test has none. Its shape is checked when the
        report is read (:class:`Report`), so this never raises on a report :meth:`lab.kinds.Kind.read` built."""
        found = self.details.get("power")
        return None if found is None else from_json(Power, found, "details.power")


@dataclass(frozen=True)
class Timing:
    """Where the study's time went.

    Attributes:
        wall_s_total: Wall time of the invocation up to report.json, plots included, seconds.
        wall_s_pipeline: Wall time up to the analysis (model loading included), seconds.
        compute_s_prompts: Sum of the prompts' own wall times, resumed prompts included (the study's cost), seconds.
        n_resumed: Prompts read from the work directory rather than run.
        model_load_s: Seconds the runner took to load the models; None where none was loaded (a fake runner, a
            merge of shards).
    """

    wall_s_total: float
    wall_s_pipeline: float
    compute_s_prompts: float
    n_resumed: int
    model_load_s: float | None


@dataclass(frozen=True)
class Report:
    """``report.json`` of ``lab study`` past its kind and format (``study.json`` before format 1), in the order
    :func:`lab.render.study.study_document` writes it.

    Attributes:
        settings: The study's settings (its work files' key: models, prompt set and its hash, gamma, seed ...).
        config: The study's configuration as given (:func:`lab.study.run.config_dict`).
        environment: The machine, libraries and models (:func:`lab.reports.environment`, with the runner's
            dtypes and where the prompts ran).
        prompts: The prompt set in counts (by category, twins).
        timing: Where the time went.
        tests: The family's tests H1 ... H6c, judged together.
        verdicts: Each test's name -> its verdict (the words of :data:`lab.verdicts.VERDICTS`).
        acceptance_bins: Acceptance of drafted tokens in quantile bins of draft entropy (bits), each with its
            Wilson interval (:class:`lab.analysis.effects.AcceptanceBin` as JSON).
        health_entropy_fit: The least-squares line of mean entropy (bits) on H1's context measure, with its band
            (:class:`lab.analysis.effects.LinearFit` as JSON); None where it could not be fitted.
        categories: Each category -> its clean prompts' count and medians (alpha; entropy, bits).
        pairs: One record per question: its twins' ids and figures (context health, entropy in bits, alpha,
            prompt tokens), clean, neutral and poisoned.
        distractor_tables: The distractor tables of H4a and H4b (secondary: outside the Holm family).
        context_measure: H1's context measure, the file it was read from and its validity record.
        length_drift: H1's measure against length within each variant and category; None where not computed.
        missing_prompts: Ids of the plan's prompts with no finished outcome.
        merged_from: Work directories a merged report was built from (empty otherwise).
        figures: Each plot's PNG name -> its caption, in the order the page shows them.
    """

    settings: dict[str, Any]
    config: dict[str, Any]
    environment: StudyEnvironment
    prompts: dict[str, Any]
    timing: Timing
    tests: list[StudyTest]
    verdicts: dict[str, str]
    acceptance_bins: list[dict[str, Any]]
    health_entropy_fit: dict[str, Any] | None
    categories: dict[str, Any]
    pairs: list[dict[str, Any]]
    distractor_tables: dict[str, Any]
    context_measure: dict[str, Any]
    length_drift: dict[str, Any] | None
    missing_prompts: list[str]
    merged_from: list[str]
    figures: dict[str, str]

    def __post_init__(self) -> None:
        # Each test's power is typed (the page reads it) inside details, whose other keys differ from test to
        # test: it is checked here, where the test's place in the report is known, so a report of another shape
        # fails when read, with one line naming where.
        for i, t in enumerate(self.tests):
            if isinstance(t, StudyTest) and t.details.get("power") is not None:
                from_json(Power, t.details["power"], f"tests[{i}].details.power")


KIND = Kind("study",
            listed=110,
            commands=("lab.commands.study",),
            page="lab.views.kinds.study",
            older_file="study.json",
            report=Report)

