"""The run session around the training loop, shared by ``marft train`` and ``trainer.train``.

So that a run started from Python and one started from the command line leave the same files:

1. **the evaluation before training**: unless the run is past update 0, the untrained policy is
   evaluated first, logged at step 0 (the learning curve starts from it) and kept as ``best/``
   (if training never beats the base model, the best adapters are the base); ``summary.json``
   gets ``eval_before`` at once, so a crash mid-training keeps it. A resumed run reads it back
   (from ``summary.json``, or from the step-0 row of ``metrics.jsonl`` when the run died before
   writing the summary);
2. **updates**: each update's metrics go to :class:`~marft_agents.run.metrics.MetricsLogger`; a resumed
   run first drops the rows logged after its checkpoint, so re-run updates appear once;
3. **signals**: SIGINT (Ctrl-C) and SIGTERM (what schedulers and ``timeout`` send) ask the trainer
   to stop at the end of the update in progress; it writes a checkpoint and the session ends
   without the final evaluation (``--resume`` continues exactly); one that arrives during the last
   update or after it lets the run complete, and its line says so. A second signal stops at once
   (a second SIGINT as :class:`StoppedAtOnce`, which ``marft`` prints as one line);
4. **end**: the final evaluation (``eval_after``), ``eval_best``, counters, wall-clock time and,
   for a learner with a critic, the critic against its ceiling over the later half of the run
   (``critic_last_half``, :func:`~marft_agents.learners.critic_health.last_half`, read from the
   whole ``metrics.jsonl``, so a resumed run counts its earlier updates) go to ``summary.json``,
   and ``learning_curve.png`` is drawn from ``metrics.jsonl``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marft_agents.run.checkpoint import BEST_DIR
from marft_agents.evaluation.problem_set import EvalResult
from marft_agents.run.metrics import MetricsLogger, read_metrics
from marft_agents.run.plotting import plot_learning_curve, run_title

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Signals that stop a run at the next safe point with a checkpoint."""
STOP_STATUS: dict[str, int] = {sig.name: 128 + int(sig) for sig in STOP_SIGNALS}
"""Signal name -> the exit status of a ``marft train`` it stopped (the shell's 128 + signal number)."""
SUMMARY_FILE = "summary.json"


@dataclass
class RunOutcome:
    """What :func:`run_session` leaves besides its files."""

    history: list[dict[str, float]]
    """Metrics of every update this call ran."""
    summary: dict[str, Any]
    """The content of ``summary.json``."""
    final_eval: EvalResult | None
    stopped_by: str | None
    """Name of the signal that stopped the run early (None when it ran to its end)."""
    plot: Path | None


def eval_dict(result: EvalResult) -> dict[str, Any]:
    """The plain-data view of an evaluation kept in ``summary.json`` (:meth:`EvalResult.figures`:
    with several samples per problem, avg@k and pass@k too)."""
    return result.figures()


def describe(result: EvalResult) -> str:
    """One human line: ``accuracy 0.610 +- 0.049 (n=100, 42 distinct)``."""
    repeats = f", {result.distinct} distinct" if result.distinct and result.distinct < result.n else ""
    return f"accuracy {result.accuracy:.3f} +- {result.stderr:.3f} (n={result.n}{repeats})"


class StoppedAtOnce(KeyboardInterrupt):
    """A second SIGINT: the run stops where it is, without a checkpoint. A ``KeyboardInterrupt``
    (so code that expects Ctrl-C still sees one) whose message is the line to print; ``marft``
    prints it instead of a traceback (exit status 130)."""


@contextlib.contextmanager
def stop_on_signals(trainer: Any, enabled: bool = True) -> Iterator[None]:
    """While inside, SIGINT/SIGTERM set ``trainer.stop_requested`` and log what the stop will do
    (``trainer.stop_outcome()``: after the last update the run just completes); a second one acts
    at once: a second SIGINT raises :class:`StoppedAtOnce`, a second SIGTERM its default action.

    Only the main thread may install signal handlers; elsewhere (or with ``enabled=False``) the
    signals keep their usual effect.
    """
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def on_signal(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if trainer.stop_requested is not None:
            restore()  # the second signal: no safe point
            if signum == signal.SIGINT:  # unwinds (files closed, engine closed), then one line: StoppedAtOnce
                last = getattr(trainer, "last_checkpoint", None)
                raise StoppedAtOnce(f"{name} again: stopped at once, without a new checkpoint (last checkpoint: "
                                    f"{last or 'none'})")
            signal.raise_signal(signum)  # SIGTERM: the usual behaviour
            return
        trainer.stop_requested = name
        what = trainer.stop_outcome() if hasattr(trainer, "stop_outcome") else \
            "stopping after the current update, with a checkpoint"
        log.warning("%s received: %s (send it again to stop at once, without a new checkpoint)", name, what)

    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)
    try:
        yield
    finally:
        restore()


def _recorded_eval_before(out: Path, summary: dict[str, Any]) -> dict[str, Any] | None:
    """``eval_before`` of an earlier call of this run (summary.json, else the step-0 metrics row)."""
    if "eval_before" in summary:
        return summary["eval_before"]
    if not (out / "metrics.jsonl").exists():
        return None
    first = next((r for r in read_metrics(out / "metrics.jsonl")
                  if r.get("step") == 0 and r.get("eval/accuracy") is not None), None)
    if first is None:
        return None
    return {"accuracy": first["eval/accuracy"], "stderr": first["eval/stderr"], "n": int(first["eval/n"]),
            "mean_reward": first.get("eval/mean_reward")}


@dataclass(frozen=True)
class SessionOptions:
    """How :func:`run_session` runs: what it evaluates, writes and shows (``marft train`` builds
    it from its flags, :func:`marft_agents.run.trainer.train` from its keywords)."""

    resume: bool = False
    """The trainer was restored from a checkpoint: keep the metrics logged up to it and the
    recorded evaluation before training."""
    eval_before: bool = True
    """Evaluate the untrained policy first (step 0), unless the run is past update 0."""
    tensorboard: bool = True
    """Also write TensorBoard events."""
    plot: bool = True
    """Draw ``learning_curve.png`` at the end."""
    progress: bool = False
    """Progress bars for the updates and the evaluations before and after training."""
    handle_signals: bool = True
    """SIGINT/SIGTERM stop after the current update with a checkpoint (main thread only)."""
    callbacks: Sequence[Callable[[int, dict[str, float]], None]] = ()
    """Called with ``(update_index, metrics)`` after every update."""
    config_source: str | None = None
    """Recorded in ``summary.json`` (the CLI passes the YAML path)."""
    say: Callable[[str], None] = log.info
    """Where the human-readable lines go (the CLI prints them; the Python API logs them)."""
    resume_hint: str = "resume=True (train(cfg, resume=True))"
    """How to continue a run a signal stopped, for the line that says so (the CLI passes its own
    command line with ``--resume``, :func:`marft_agents.hints.resume_hint`)."""


@dataclass
class _Session:
    """What the steps of one :func:`run_session` share: the options (silenced on ranks other than
    0), the run's folder, ``summary.json``'s content and the metrics logger."""

    trainer: Any
    options: SessionOptions
    main: bool
    out: Path
    summary: dict[str, Any]
    logger: Any

    @property
    def summary_path(self) -> Path:
        return self.out / SUMMARY_FILE

    def write_summary(self) -> None:
        if self.main:
            self.summary_path.write_text(json.dumps(self.summary, indent=2))


def run_session(trainer: Any, options: SessionOptions = SessionOptions()) -> RunOutcome:
    """Run ``trainer`` (built by ``prepare_trainer``, restored when ``options.resume``) as the
    module docstring says: the evaluation before training, the updates, the stop or the final evaluation, the
    summary and the plot."""
    # Under torchrun every rank runs the session (evaluations and updates are collective), but
    # only rank 0 writes metrics, summary.json and the plot, and speaks.
    main = getattr(getattr(trainer, "world", None), "is_main", True)
    if not main:
        options = dataclasses.replace(options, say=_silent, plot=False, progress=False)
    out = Path(trainer.cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    summary_path = out / SUMMARY_FILE
    summary = json.loads(summary_path.read_text()) if options.resume and summary_path.exists() else {}
    summary.pop("eval_after", None)  # describes an earlier end of the run; this call writes its own
    # Resume: keep what was logged up to the checkpoint (step 0 = the evaluation before training); fresh: nothing.
    logger = (MetricsLogger(out, tensorboard=options.tensorboard,
                            keep_until=trainer.counters["update"] if options.resume else -1) if main else _NoMetrics())
    session = _Session(trainer, options, main, out, summary, logger)
    try:
        with stop_on_signals(trainer, options.handle_signals):
            _eval_before(session)
            history = _updates(session)
            stopped_by, final = _stop_or_final_eval(session)
    finally:
        logger.close()
    _summarise(session, final, stopped_by, time.perf_counter() - started)
    png = _plot(session)
    options.say(f"metrics: {out / 'metrics.csv'}  summary: {summary_path}")
    return RunOutcome(history=history, summary=summary, final_eval=final, stopped_by=stopped_by, plot=png)


def _eval_before(session: _Session) -> None:
    """Step 1: the evaluation before training (read back on a resume), logged at step 0 and kept
    as ``best/``; ``summary.json`` gets it at once, so a crash mid-training keeps it."""
    trainer, options, summary = session.trainer, session.options, session.summary
    recorded = _recorded_eval_before(session.out, summary) if options.resume else None
    if recorded is not None:
        summary["eval_before"] = recorded
    elif options.eval_before and trainer.counters["update"] == 0:
        result = trainer.evaluate(progress="eval before training" if options.progress else None)
        trainer.keep_if_best(result)  # if training never beats the base model, best/ is the base
        summary["eval_before"] = eval_dict(result)
        session.logger.log(0, {"eval/accuracy": result.accuracy, "eval/stderr": result.stderr,
                               "eval/n": result.n, "eval/mean_reward": result.mean_reward,
                               "eval/seconds": result.seconds})
        session.write_summary()  # survives a crash mid-training
        options.say(f"eval before training: {describe(result)}")


def _updates(session: _Session) -> list[dict[str, float]]:
    """Step 2: the trainer's remaining updates, each logged, passed to the callbacks and shown
    on the progress bar; returns their metrics."""
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    trainer, options = session.trainer, session.options
    history: list[dict[str, float]] = []
    bar = tqdm(total=trainer.cfg.schedule.num_updates, initial=trainer.counters["update"], desc="updates",
               disable=not options.progress, dynamic_ncols=True)
    # while the bar is drawn, log lines go above it (tqdm.write), not onto its line
    with logging_redirect_tqdm() if options.progress else contextlib.nullcontext():
        for metrics in trainer.run():
            session.logger.log(trainer.counters["update"], metrics)
            history.append(metrics)
            for callback in options.callbacks:
                callback(trainer.counters["update"] - 1, metrics)
            shown = {"reward": metrics.get("rollout/reward_mean"), "kl": metrics.get("losses/approx_kl"),
                     "eval": metrics.get("eval/accuracy")}
            bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items() if isinstance(v, float)})
            bar.update(1)
    bar.close()
    return history


def _stop_or_final_eval(session: _Session) -> tuple[str | None, EvalResult | None]:
    """Step 3: the signal that stopped the run (None when it ran to its end: a signal after the
    last update started stops nothing), else the final evaluation (``eval.at_end``)."""
    trainer, options = session.trainer, session.options
    stopped_by = trainer.stop_requested
    if stopped_by is not None and trainer.finished:
        options.say(f"{stopped_by} arrived after the last update had started: the run is complete, not stopped")
        stopped_by = None
    if stopped_by is not None:
        return stopped_by, None
    final = trainer.final_eval or (
        trainer.evaluate(progress="final evaluation" if options.progress else None)
        if trainer.cfg.eval.at_end else None)
    return None, final


def _summarise(session: _Session, final: EvalResult | None, stopped_by: str | None, seconds: float) -> None:
    """Step 4: ``summary.json``: the final and best evaluations, counters, wall-clock time, the
    critic over the later half of the run and the stop, each also said in one line."""
    trainer, say, summary, out = session.trainer, session.options.say, session.summary, session.out
    if final is not None:
        summary["eval_after"] = eval_dict(final)
        say(f"eval after {trainer.counters['update']} updates: {describe(final)}")
    if trainer.best_eval is not None:
        summary["eval_best"] = trainer.best_eval
        say(f"best evaluation: accuracy {trainer.best_eval['accuracy']:.3f} after update "
            f"{trainer.best_eval['update']} (adapters in {out / BEST_DIR})")
    summary.update({"counters": trainer.counters, "config": session.options.config_source,
                    "wall_clock_s_this_call": round(seconds, 1),
                    "last_checkpoint": str(trainer.last_checkpoint) if trainer.last_checkpoint else None})
    from marft_agents.learners.critic_health import last_half  # torch: not at import time

    metrics_file = out / "metrics.jsonl"
    critic = last_half(read_metrics(metrics_file)) if session.main and metrics_file.exists() else None
    if critic is not None:
        summary["critic_last_half"] = critic.as_dict()
        say(critic.line())
    summary.pop("stopped_by", None)
    if stopped_by is not None:
        summary["stopped_by"] = stopped_by
        say(f"stopped by {stopped_by} after {trainer.counters['update']} updates; checkpoint "
            f"{trainer.last_checkpoint}; continue with {session.options.resume_hint}")
    session.write_summary()


def _plot(session: _Session) -> Path | None:
    """Step 5: ``learning_curve.png`` from ``metrics.jsonl`` (``options.plot``)."""
    if not session.options.plot:
        return None
    cfg = session.trainer.cfg
    png = plot_learning_curve(session.out / "metrics.jsonl", session.out / "learning_curve.png",
                              title=run_title(cfg.algorithm, cfg.env.id, cfg.env.kwargs))
    if png:
        session.options.say(f"learning curve: {png}")
    return png


def _silent(_line: str) -> None:
    """``say`` of the ranks other than 0."""


class _NoMetrics:
    """The metrics logger of the ranks other than 0: rank 0 logs the (identical) global metrics."""

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass
