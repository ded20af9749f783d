"""The verdict words of every test the lab reports, spelled once.

Standard library only, so that every layer may import it: the judges (:mod:`lab.analysis.hypotheses`, which
re-exports the words, and :mod:`lab.analysis.study`), the renderers of the terminal and ``summary.md``
(:mod:`lab.render`) and the pages (:mod:`lab.views`). The rule that gives a verdict is the study's
(:mod:`lab.analysis`: Holm-corrected p, the interval against the smallest effect of interest); a report
with a test of its own (the stream's null, a measure's validation bars) stores or derives one of these
words and prints it with its own phrase table, so its printed wording stays as it was.

* ``supported``: the effect is there, in the predicted direction.
* ``not supported``: the effect is absent or opposite (significant the other way, or its whole interval
  short of the smallest effect of interest).
* ``inconclusive``: neither (too little data, a negative control that rejects).
* ``untestable``: a precondition of the test failed (its measure does not read what it names on this
  model), so no n would decide it; it comes with its reason.
"""

from __future__ import annotations

from typing import Any, Mapping

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
UNTESTABLE = "untestable"  # a precondition failed (its measure does not read what it names): no n would decide it
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, UNTESTABLE)
DECIDED = (SUPPORTED, NOT_SUPPORTED)  # the verdicts that decide; a headline names each with its effect
# How an untestable test's note opens, before its reason (lab.analysis.study); a study written before
# reports carried the reason in its own field holds it only there.
UNTESTABLE_NOTE = "untestable on this model: "
# The verdict of a test of a null (null_rejected) in the words summary.md and the page give it (the terminal
# shouts a rejection: lab.render.stream).
NULL_WORDS = {SUPPORTED: "rejects the null", INCONCLUSIVE: "does not reject"}


def settled(verdict: str, untestable: str = "") -> str:
    """A test's verdict once its precondition is read: :data:`UNTESTABLE` where ``untestable`` gives a reason,
    else ``verdict`` (the rule's). The one place that says an untestable test is no other verdict.

    >>> settled(INCONCLUSIVE, "the measure fails validation"), settled(SUPPORTED)
    ('untestable', 'supported')
    """
    return UNTESTABLE if untestable else verdict


def untestable_reason(test: Mapping[str, Any]) -> str:
    """Why a reported test (a test of ``study.json``) is untestable, ``""`` when it is testable: its
    ``untestable`` field, or, in a report written before that field (none in the test), the reason its note
    gives after :data:`UNTESTABLE_NOTE`.

    >>> untestable_reason({"note": "untestable on this model: it fails"})
    'it fails'
    >>> untestable_reason({"untestable": "", "note": "untestable on this model: it fails"})
    ''
    """
    if "untestable" in test:
        return test["untestable"] or ""
    note = str(test.get("note") or "")
    return note.removeprefix(UNTESTABLE_NOTE) if note.startswith(UNTESTABLE_NOTE) else ""


def null_rejected(reject: bool) -> str:
    """The verdict of a test of a null at a false-positive rate stated in advance (``lab stream``'s H1 and its
    control): rejecting the null supports the hypothesis; not rejecting it decides nothing (no interval is held
    against a smallest effect of interest, so it never says :data:`NOT_SUPPORTED`).

    >>> null_rejected(True), null_rejected(False)
    ('supported', 'inconclusive')
    """
    return SUPPORTED if reject else INCONCLUSIVE


def meets_bars(ok: bool) -> str:
    """The verdict of a check against bars stated in advance (a measure's validation on independent text):
    meeting every bar supports the claim that the measure reads what it names; missing one does not.

    >>> meets_bars(True), meets_bars(False)
    ('supported', 'not supported')
    """
    return SUPPORTED if ok else NOT_SUPPORTED

