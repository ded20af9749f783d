"""Flags shared by several subcommands, with the same names and help everywhere, and the steps they share
(checking the model flags, loading under a status line, saving after the report); the runtime choice is
:mod:`lab.commands.runtime_choice`.

Every command module imports this one while ``lab --help`` builds the parser, so it stays light:
torch and the model loader are imported inside the functions that run a command.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lab.models.profiles import DEFAULT_PROFILE, PROFILES
from lab.models.weights import WEIGHTS
from lab import ranges
from lab.files import MAX_TEXT_BYTES, read_text
from lab.ranges import NumberTextError, Range, Underscored, read_number, typed_refusal
from lab.safe_text import clipped

if TYPE_CHECKING:
    import torch


# The range of each numeric flag, by dest, for every command that has the flag (lab.cli checks them before a
# command runs, so before any model loads): the ranges the configs and the file schemas read too (lab.ranges).
_FLAG_RANGES = {
    "seed": ranges.SEED,
    "gamma": ranges.GAMMA,
    "resamples": ranges.RESAMPLES,
    "top_alternatives": ranges.TOP_ALTERNATIVES,
    "max_new_tokens": ranges.TOKENS,
    "tokens": ranges.TOKENS,
    "chunk_tokens": ranges.TOKENS,
    "detect_tokens": ranges.DETECT_TOKENS,
    "prompt_tokens": ranges.TOKENS,
    "recompute_every": ranges.TOKENS,
    "recompute_batch": ranges.RECOMPUTE_BATCH,
    "eager_length": ranges.EAGER_LENGTH,
    "repeats": ranges.REPEATS,
    "stats_iterations": ranges.ITERATIONS,
    "steps": ranges.ITERATIONS,
    "threads": ranges.THREADS,
    "workers": ranges.WORKERS,
    "temperature": ranges.TEMPERATURE,
    "top_p": ranges.TOP_P,
    "top_k": ranges.TOP_K,
    "limit": ranges.LIMIT,
    "ray_actors": ranges.RAY_ACTORS,
    "ray_timeout": ranges.RAY_TIMEOUT,
    "new_tokens": ranges.TOKENS,
    "pilot_limit": ranges.PILOT_LIMIT,
    "dense_rows": ranges.DENSE_ROWS,
    "problems": ranges.PROBLEMS,
}
# (command, dest) -> range, where a command gives a flag another range than _FLAG_RANGES.
_BENCH_COMMANDS = ("bench", "bench-seed-tables", "bench-tune", "bench-tune-runtime")
_COMMAND_RANGES = {
    **{(command, "seed"): ranges.BENCH_SEED for command in _BENCH_COMMANDS},
    **{(command, "max_new_tokens"): ranges.BENCH_NEW_TOKENS for command in _BENCH_COMMANDS},
    ("stream", "temperature"): ranges.SAMPLED_TEMPERATURE,
    ("validate-context", "new_tokens"): ranges.LOOKBACK_NEW_TOKENS,
    ("study", "temperature"): ranges.SAMPLED_TEMPERATURE,
}
# Commands whose --seed has a default of its own rather than None, so a typed seed cannot be told from it
# (lab bench's 0): not refused under greedy decoding.
_SEED_DEFAULTED = frozenset({"bench"})


def flag_range(command: str | None, dest: str) -> Range | None:
    """The range of ``dest``'s flag in ``lab command`` (None: the flag has none here)."""
    return _COMMAND_RANGES.get((command, dest), _FLAG_RANGES.get(dest))


def range_text(command: str | None, dest: str) -> str:
    """``"in [lo, hi]"`` for a flag's help, from the one table :func:`check_bounds` checks."""
    rng = flag_range(command, dest)
    assert rng is not None, f"lab {command} --{dest.replace('_', '-')} has no range"
    return f"in {rng.text}"


def check_bounds(args: argparse.Namespace) -> None:
    """Check every numeric flag against its range, and the flag combinations that would do nothing,
    before a command runs (so before any model loads).

    Ranges: :data:`_FLAG_RANGES`, with :data:`_COMMAND_RANGES` where a command differs. A flag left at
    None (not typed, its default filled in later) is not checked.

    Raises:
        ValueError: a value outside its range, a sampling filter (``--top-k``, ``--top-p``) or a
            typed ``--seed`` with ``--temperature 0`` (greedy draws nothing to filter or seed), or a
            ``--device cpu:N`` (the CPU has no index); naming the flag as typed.
    """
    command = getattr(args, "command", None)
    for dest, value in vars(args).items():
        rng = flag_range(command, dest)
        if rng is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            rng.check(f"--{dest.replace('_', '-')}", value)
    if getattr(args, "temperature", None) == 0:
        typed = [f for f, on in (("--top-k", getattr(args, "top_k", None) is not None),
                                 ("--top-p", getattr(args, "top_p", 1.0) != 1.0)) if on]
        if typed:
            them = "them" if len(typed) > 1 else "it"
            raise ValueError(f"{' and '.join(typed)} would have no effect: sampling filters, and --temperature 0 is "
                             f"greedy; give --temperature > 0 or drop {them}")
        if getattr(args, "seed", None) is not None and command not in _SEED_DEFAULTED:
            raise ValueError(f"--seed {args.seed} has no effect with greedy decoding (--temperature 0): give "
                             "--temperature > 0 or drop --seed")
    device = getattr(args, "device", None)
    if isinstance(device, str) and re.fullmatch(r"\s*cpu\s*:.*", device):
        raise ValueError(f"--device {device!r}: the CPU has no index; use --device cpu")


def parse_lengths(text: str, flag: str, rng: Range) -> tuple[int, ...]:
    """A comma-separated list of integers, each in ``rng`` (``--gammas``, ``--lengths``, ``--long-lengths``).

    Raises:
        ValueError: an empty item ("1,,2"), a non-integer, or a value outside ``rng``, naming ``flag``; an item
            :func:`lab.ranges.read_number` refuses (too many digits, an underscore) is echoed alone.
    """
    values = []
    for item in text.split(","):  # an empty item is an error, not skipped
        try:
            values.append(read_number(item, integer=True))
        except NumberTextError as exc:
            raise ValueError(typed_refusal(flag, item, exc, rng)) from None
        except ValueError:
            raise ValueError(f"{flag}={clipped(text)} must be comma-separated integers, e.g. 1,2,4") from None
    for v in values:
        rng.check(flag, v)
    return tuple(values)


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)``.

    Raises:
        ValueError: not two integers with 1 <= K <= N, naming ``--shard``.
    """
    parts = text.split("/")
    if len(parts) != 2:
        raise ValueError(f"--shard {clipped(text)} must be K/N, e.g. 2/4")
    k_n = []
    for name, part in zip("KN", parts):
        try:
            k_n.append(read_number(part, integer=True))
        except NumberTextError as exc:
            needs = "" if isinstance(exc, Underscored) else "; K/N needs 1 <= K <= N"
            raise ValueError(f"--shard {clipped(text)}: {name} {exc}{needs}") from None
        except ValueError:
            raise ValueError(f"--shard {clipped(text)} must be K/N, e.g. 2/4") from None
    from lab.runs.shards import check_shard  # the one shard rule (stdlib only)

    k, n = k_n
    check_shard((k, n), f"--shard {clipped(text)} needs 1 <= K <= N")
    return k, n


def add_ray_args(p: argparse.ArgumentParser, *, units: str, command: str, what: str) -> None:
    """``--ray``, ``--ray-timeout`` and ``--ray-actors`` of ``command``: its ``units`` ("prompts", "triples") on a
    Ray cluster; ``what`` names the run in the help ("study", "run")."""
    from lab.runs.cluster import DEFAULT_CONNECT_TIMEOUT_S

    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help=f"run the {units} on a Ray cluster (needs the lab[cluster] extra): 'auto' (the cluster ray "
                        "start left running), host:port or ray://host:port joins a running cluster, which must "
                        "answer within --ray-timeout; no address (or 'local') starts a local one on this machine, "
                        "sized to it, its logs in a lab-ray-* temp folder")
    p.add_argument("--ray-timeout", type=float, default=None, metavar="S",
                   help=f"with --ray ADDRESS: seconds the cluster has to answer before the {what} gives up, "
                        f"{range_text(command, 'ray_timeout')} (default: {DEFAULT_CONNECT_TIMEOUT_S:g})")
    p.add_argument("--ray-actors", type=int, default=None, metavar="N",
                   help=f"with --ray: actors to start, each holding the target and draft, "
                        f"{range_text(command, 'ray_actors')} (default: one per GPU, else one per --threads CPUs of "
                        "the cluster)")


def cluster_config(args: argparse.Namespace):
    """The :class:`lab.runs.cluster.ClusterConfig` of ``--ray`` (``None`` without ``--ray``).

    Raises:
        ValueError: ``--ray-actors`` or ``--ray-timeout`` without ``--ray`` (``--ray-timeout`` without an
            address too: a local cluster has no answer to wait for), an address of no accepted form
            (:func:`lab.runs.cluster.parse_address`), or Ray not installed (naming the
            ``lab[cluster]`` extra to install). The counts' and the timeout's ranges are
            :func:`check_bounds`'s (and :class:`lab.runs.cluster.ClusterConfig`'s).
    """
    from lab.runs.cluster import DEFAULT_CONNECT_TIMEOUT_S, ClusterConfig, parse_address, require_ray

    if args.ray is None:
        for flag, v in (("--ray-actors", args.ray_actors), ("--ray-timeout", args.ray_timeout)):
            if v is not None:
                raise ValueError(f"{flag} needs --ray")
        return None
    timeout = DEFAULT_CONNECT_TIMEOUT_S if args.ray_timeout is None else args.ray_timeout
    address = parse_address(args.ray)  # before Ray is imported: a bad address is bad input, Ray or not
    if address is None and args.ray_timeout is not None:  # it bounds a running cluster's answer only
        raise ValueError("--ray-timeout has no effect on the local cluster --ray without an address starts; it "
                         "bounds how long --ray ADDRESS has to answer: drop it")
    require_ray()
    return ClusterConfig(address=address, n_actors=args.ray_actors, threads=args.threads or 1,
                         connect_timeout_s=timeout)


def parse_adaptive(text: str):
    """``--adaptive entropy:X`` / ``pmin:X`` as a :class:`lab.speculative.AdaptiveDraftLength`.

    Raises:
        ValueError: a bad spec, naming ``--adaptive`` as typed and the threshold as X.
    """
    from lab.speculative.drafts import AdaptiveDraftLength

    try:
        return AdaptiveDraftLength.parse(text)
    except ValueError as exc:
        message = re.sub(r"^(entropy_threshold|pmin)(?=[= ])", "X", str(exc))  # the README's name for the threshold
        raise ValueError(f"--adaptive {clipped(text)}: {message}") from None


def check_adaptive_draft(adaptive: str, draft_kind: str) -> None:
    """Refuse ``--adaptive`` for a draft whose stop could never fire.

    An adaptive stop reads the draft's own distribution q (its normalized entropy, its top
    probability: :class:`lab.speculative.drafts.AdaptiveDraftLength`). The prompt-lookup draft
    copies tokens, its q one-hot (entropy 0, top probability 1), and ignores the stop.

    Args:
        adaptive: ``--adaptive`` as typed (``entropy:X`` / ``pmin:X``).
        draft_kind: The draft's kind (:func:`lab.speculative.draft_specs.check_draft_spec`).

    Raises:
        ValueError: a prompt-lookup or auto draft (auto chooses each round's length itself), naming
            ``--adaptive`` as typed.
    """
    if draft_kind == "auto":
        raise ValueError(f"--adaptive {adaptive!r}: the auto draft chooses each round's draft length from the costs "
                         "it measures; use --draft MODEL for a fixed set-up with an adaptive stop")
    if draft_kind == "prompt-lookup":
        raise ValueError(f"--adaptive {adaptive!r} has no effect with the prompt-lookup draft: it copies tokens "
                         "(q one-hot: entropy 0, top probability 1), so no stop fires; drop --adaptive")


def command_parser(subparsers: argparse._SubParsersAction, name: str, run: Callable[[argparse.Namespace], int],
                   doc: str, **kwargs: Any) -> argparse.ArgumentParser:
    """``lab name``'s parser, which runs ``run``, in the words of ``doc``, the command module's docstring: its
    first paragraph after ``lab name ...``: (less the full stop) is the line ``lab --help`` lists, its second the
    description atop the command's own ``--help`` (``kwargs``: argparse's others; a ``description`` replaces
    it). The command's flags are added to the parser in the order its help lists them.
    """
    head, _, rest = doc.strip().partition("\n\n")
    assert "``: " in head and head.endswith("."), f"lab {name}: its docstring opens with ``lab {name}``: ..."
    summary = " ".join(head.partition("``: ")[2].removesuffix(".").split())
    kwargs.setdefault("description", " ".join(rest.split("\n\n", 1)[0].split()))
    p = subparsers.add_parser(name, help=summary, **kwargs)
    p.set_defaults(func=run)
    return p


def add_ranged_arg(p: argparse.ArgumentParser, command: str | None, flag: str, default: float | None, before: str,
                   after: str = "") -> None:
    """A numeric ``flag`` of ``lab command``: ``int`` or ``float`` as its range (:func:`flag_range`) says, its
    help ``before`` + the range (:func:`range_text`) + ``after``."""
    dest = flag.removeprefix("--").replace("-", "_")
    rng = flag_range(command, dest)
    assert rng is not None, f"lab {command} {flag} has no range"
    p.add_argument(flag, type=int if rng.integer else float, default=default,
                   help=f"{before}{range_text(command, dest)}{after}")


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_PROFILE,
                   help=f"profile ({', '.join(PROFILES)}), local path or hub id (default: {DEFAULT_PROFILE})")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: mps, then cuda, then cpu)")
    p.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: float32 on CPU, half on GPU)")
    p.add_argument("--weights", default="float32", choices=WEIGHTS, action=_TypedWeights,
                   help="the linear layers' weights: float32 (as dequantized), bfloat16, int8 (per channel) or q4 "
                        "(a GGUF profile's own 4-bit codes through torch's CPU int4 kernel); CPU only unless "
                        "float32 (default: float32)")


class _TypedWeights(argparse.Action):
    """``--weights`` that also records it was typed (``weights_typed``): a tuned default may replace only an untyped one."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: D102 - argparse's
        setattr(namespace, self.dest, values)
        setattr(namespace, "weights_typed", True)


def add_sampling_args(p: argparse.ArgumentParser, command: str, more: str = "") -> None:
    """``--temperature`` (``more`` ends its help), then the sampling filters ``--top-p`` and ``--top-k`` (refused
    with ``--temperature 0``, :func:`check_bounds`)."""
    add_ranged_arg(p, command, "--temperature", 0.0, "", f": 0 = greedy (default); > 0 samples{more}")
    add_ranged_arg(p, command, "--top-p", 1.0, "nucleus mass when sampling, ",
                   " (default: 1 = off; needs --temperature > 0)")
    add_ranged_arg(p, command, "--top-k", None, "keep the k most likely tokens when sampling, ",
                   " (default: off; needs --temperature > 0)")


def add_decode_args(p: argparse.ArgumentParser, command: str) -> None:
    """``--max-new-tokens``, :func:`add_sampling_args` and a ``--seed`` drawn fresh when not typed."""
    add_ranged_arg(p, command, "--max-new-tokens", 64, "stop after this many new tokens, ", " (default: 64)")
    add_sampling_args(p, command)
    add_ranged_arg(p, command, "--seed", None, "sampling seed, ",
                   " (default: a fresh one, recorded in the report; needs --temperature > 0)")


def add_calibration_prompts_arg(p: argparse.ArgumentParser, what: str) -> None:
    """``--prompts`` of the calibrations: a prompt file in the calibration prompts' format, ``what`` naming it."""
    p.add_argument("--prompts", default=None,
                   help=f"{what}, one {{\"id\", \"prompt\", \"system\"?}} per line (default: the packaged "
                        "lab/data/calibration_prompts.jsonl)")


def add_draft_weights_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--draft-weights", default="float32", choices=WEIGHTS,
                   help="a draft model's linear-layer weights, as --weights (default: float32)")


def add_prompt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", help="the user message")
    p.add_argument("--system", default=None, help="system prompt (default: the template's own, if any)")


def add_context_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--context", default=None, metavar="TEXT",
                   help="text placed before the prompt (a blank line between), whose reading the report scores with "
                        "the model's validated context measure, its validity record beside it (default: none)")
    g.add_argument("--context-file", default=None, metavar="FILE", help="read --context from this UTF-8 text file")


def read_context_arg(args: argparse.Namespace) -> str | None:
    """``--context`` or ``--context-file``'s text, None when neither is given.

    Raises:
        ValueError: the file is refused (:func:`lab.files.read_text`: no such file, not a regular file, larger
            than :data:`lab.files.MAX_TEXT_BYTES`, not UTF-8), or the text is empty.
    """
    text, path = getattr(args, "context", None), getattr(args, "context_file", None)
    if path is not None:
        text = read_text(path, MAX_TEXT_BYTES, f"--context-file {path}").removeprefix("\ufeff")  # a BOM is not text
    if text is not None and not text.strip():
        raise ValueError(f"--context-file={path!r} holds no text" if path is not None else
                         f"--context={text!r} holds no text")
    # the measure was validated on a context followed by exactly one blank line: no edge whitespace of its own
    return None if text is None else text.strip()


def context_messages(args: argparse.Namespace, question: list[dict[str, str]]) -> tuple[str | None, list, list]:
    """``(context, question, messages)``: ``--context`` (:func:`read_context_arg`), the question and the messages
    the command runs, the context before the question (:func:`lab.health.context_items.with_context`), or the
    question alone. With a context the question's text loses its leading whitespace: blank lines after the
    context's own would merge into one token with them, and the question's tokens would differ with and without.
    The returned question's last message (the user's) is the prompt as the model is given it: the one a report
    records.

    Raises:
        ValueError: as :func:`read_context_arg`.
    """
    from lab.health.context_items import with_context

    context = read_context_arg(args)
    if context is None:
        return None, question, question
    question = [dict(m) for m in question]
    last = max(i for i, m in enumerate(question) if m["role"] == "user")
    question[last]["content"] = question[last]["content"].lstrip()
    return context, question, with_context(question, context)


def check_context_room(model: Any, tokenizer: Any, messages: list[dict[str, str]], context: str | None) -> None:
    """Refuse, right after the model loads and before any prefill, a ``--context`` whose prompt leaves no room for
    the 24-token continuation the measure reads (:data:`lab.health.context_validity.NEW_TOKENS`).

    Raises:
        ValueError: one line naming ``--context`` and the lengths.
    """
    if context is None:
        return
    from lab.decode import context_length
    from lab.health.context_validity import NEW_TOKENS
    from lab.models.chat import encode_chat

    n, limit = int(encode_chat(tokenizer, messages).shape[1]), context_length(model)
    if limit is not None and n + NEW_TOKENS > limit:
        raise ValueError(f"--context: the prompt with it is {n} tokens, and reading the context needs {NEW_TOKENS} "
                         f"more (a greedy continuation), past the model's context of {limit}; shorten the context")


def read_context_step(err: Any, model: Any, tokenizer: Any, profile: str, question: list[dict[str, str]],
                      context: str | None) -> Any:
    """The ``--context`` reading (:func:`lab.health.context_items.read_context`) under a status line; None
    without a context."""
    if context is None:
        return None
    from lab.health.context_items import read_context

    with err.status("reading the context (24-token greedy continuation, teacher-forced)"):
        return read_context(model, tokenizer, profile, question, context)


def context_fields(context: str | None, reading: Any) -> dict[str, Any]:
    """report.json's ``context`` and ``context_measure`` for a ``--context`` reading ({} without one)."""
    return {} if reading is None else {"context": context, "context_measure": reading.to_json()}


def load_model_step(err: Any, args: argparse.Namespace, device: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``--model`` in ``--dtype`` and ``--weights`` on ``device`` under a status line;
    ``kwargs`` go to :func:`lab.models.loading.load_model`."""
    from lab.models.loading import load_model

    with err.status(f"loading {args.model} on {device}"):
        return load_model(args.model, device=device, dtype=args.dtype, weights=args.weights, **kwargs)


def save_after_report(folder: Any, what: str, save: Callable[[], Any],
                      fix: str = "set LAB_CALIBRATION_DIR to a writable folder and re-run") -> Any:
    """``save()`` (a calibration or tuning file's writer) once the report in ``folder`` is complete.

    Raises:
        lab.reports.ReportWriteError: an ``OSError`` (a folder in the file's place, a full disk), in one line
            saying ``what`` ("the choice could not be saved to '...'"), that the report stays, and ``fix``
            (the CLI exits 1).
    """
    from lab.reports import ReportWriteError

    try:
        return save()
    except OSError as exc:
        raise ReportWriteError(f"the report is complete in {str(folder)!r}, but {what} ({exc.strerror or exc}); "
                               f"{fix}") from exc


def saved_line(folder: Any, what: str, save: Callable[[], Any], replaces: str | None, profile: str,
               tail: str = "") -> str:
    """``--save`` after the report: :func:`save_after_report`, and the line saying where and what it replaces
    (``tail`` after that).

    Raises:
        ValueError: ``save()`` refused what it was given (nothing saved; the report stays).
        lab.reports.ReportWriteError: as :func:`save_after_report`.
    """
    try:
        saved = save_after_report(folder, what, save)
    except ValueError as exc:
        raise ValueError(f"--save: {exc}; nothing saved, the report is in {str(folder)!r}") from None
    if replaces is None:
        return f"saved: {saved}"
    return f"saved: {saved}; it replaces {replaces} for every later run on {profile}{tail}"


def add_out_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="reports", type=os.path.expanduser,  # a quoted '~/x' is the user's home too
                   help="reports root; a new <timestamp>-<kind>-<slug>/ goes inside (default: reports/)")


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    add_ranged_arg(p, None, "--threads", None, "torch intra-op threads for the whole benchmark, ",
                   " (default: torch's choice); the report records them with the load average and warns when the "
                   "machine was busy")


def check_model_args(args: argparse.Namespace) -> torch.device:
    """Validate ``--model``, ``--device`` and ``--dtype`` before any model loads.

    Returns:
        The device to load on.

    Raises:
        ValueError: an unavailable device, an unknown dtype, or a model name that is
            neither a profile, a path nor a hub id.
        ModelUnavailableError: an embedded model's package is missing, or a hub model
            is neither cached nor fetchable (offline mode, hub unreachable).
    """
    from lab.models.devices import parse_dtype, resolve_device
    from lab.models.loading import check_model_available, is_gguf_model
    from lab.models.qlinear import check_cpu

    device = resolve_device(args.device)
    parse_dtype(args.dtype, device)
    if getattr(args, "weights", "float32") != "float32":
        check_cpu(device)
        if args.weights == "q4" and not is_gguf_model(args.model):
            raise ValueError(f"--weights q4 keeps a GGUF file's own 4-bit codes; {args.model!r} is not a GGUF profile "
                             "(use bfloat16 or int8 for it)")
    check_model_available(args.model)
    return device


def draft_cost(err: Any, draft: Any, draft_spec: str) -> Any:
    """The draft's measured cost (:meth:`lab.speculative.drafts.Drafter.facts`), its note warned on stderr."""
    cost = draft.facts().cost
    if cost is not None and cost.note:
        err.print(f"warning: --draft {draft_spec}: {cost.note}", style="yellow", markup=False, highlight=False)
    return cost
