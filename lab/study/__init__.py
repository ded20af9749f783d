"""The empirical study: prefill -> decode -> speculative decoding, per prompt, with resume.

The lab's thesis: context quality shapes attention during prefill,
attention shapes the model's confidence (entropy) during decode, and confidence
decides how well speculative decoding works. For every prompt of the prompt set
(:mod:`lab.prompts`) one pipeline measures, with the lab's own modules:

1. **prefill** (:func:`lab.sinks.prefill.analyze_prefill`): the graded context health
   (0..10, :func:`lab.health.graded.graded_health`) and the count-based one beside it
   (``content_sink_health``), the sink rate at position 0 and its mean over
   content positions, the share of attention received by position 0, and the
   number of content sinks;
2. **decode**: mean, max and variance of the per-step entropy (bits), the mean
   varentropy (bits^2), and each generated token's entropy with its word position
   from the tokenizer's decoding (H5), read off step 3's verify passes
   (:func:`lab.tracker.speculative.track_speculative`; one target decode per prompt, going on
   from step 1's KV cache);
3. **speculative decoding** (:func:`lab.speculative.loop.speculative_generate`) with the
   draft (``--draft`` or the profile's, :attr:`lab.models.profiles.ModelProfile.draft`;
   nothing assumes an early-exit draft): alpha, tau, and for every drafted token
   its draft entropy and whether the target accepted it; for the H6 subset
   (:func:`lab.study.work.temperature_subset`) also alpha at the other design
   temperatures.

Sampling mode, consistently: the decode samples at ``temperature`` (default 1.0,
no top-k/top-p) with a seed derived from the study seed and the prompt id
(:func:`lab.study.config.prompt_seed`), so acceptance is the probabilistic alpha of Leviathan et
al. (2023) (p = target, q = draft; a drafted token is kept with probability
min(1, p/q)), a prompt's numbers do not depend on the order prompts run in, and
a resumed study equals an uninterrupted one.

Resume: each finished prompt is written to ``<out>/.study-work-<key>/outcomes/<stem>-<digest>.json``
(:func:`lab.files.write_text_atomic`, so a file is either complete or absent); ``<key>`` is
a hash of every setting that changes the numbers (:func:`lab.runs.files.settings_key`). A rerun
with the same settings loads the finished prompts and runs only the rest;
``--resume <work dir>`` (:func:`lab.study.work.plan_from_work_dir`) continues that directory
itself, whatever its name, with its stored settings and prompt set (``prompts.json``);
a work file that does not parse or does not match is ignored
and its prompt redone. The final report is written atomically by
:mod:`lab.render.study` via :func:`lab.reports.report_dir`, after which the work
directory is removed (:func:`lab.study.work.discard_work`).

Shards (:func:`lab.study.work.shard_prompts`, :func:`lab.study.run.merge_study`): ``--shard K/N``
runs a disjoint, category-balanced slice into the same work directory (the shard
is not a setting, so all shards share the key); ``--merge`` assembles one study
from the shards' finished prompts and refuses shards whose settings differ.

Modules: :mod:`lab.study.config` (settings, interfaces), :mod:`lab.study.outcome` (the
per-prompt records: :class:`~lab.study.outcome.PromptRow`, one ``per_prompt.csv`` row),
:mod:`lab.study.runner` (the real runner), :mod:`lab.study.work` (plan, work
directory, shards, its lock on :mod:`lab.runs`), :mod:`lab.study.run` (running through an executor, merging,
tables; :class:`~lab.study.run.StudyExperiment`, the study on the run engine, :mod:`lab.runs.engine`, so
``lab study --ray`` runs its prompts on :mod:`lab.runs.cluster`).

The per-prompt runner is injectable (:class:`lab.study.config.Runner`): tests pass a fake;
:class:`lab.study.runner.ModelRunner` is the real one.
"""
