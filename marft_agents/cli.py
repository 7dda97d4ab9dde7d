"""The ``marft`` command: ``marft train``, ``marft eval``, ``marft envs``, ``marft config``, ``marft score``.

``marft train --config run.yaml`` trains as configured (see ``marft_agents/config.py``) inside the
run session of :mod:`marft_agents.run.session`: the untrained policy is evaluated first (logged at
step 0), every update is logged to ``<output_dir>/metrics.{jsonl,csv}`` and TensorBoard with a
progress bar, and the run ends with ``learning_curve.png`` and ``summary.json``. ``--resume``
continues from the latest checkpoint in ``output_dir`` (re-running a finished run with
``--resume`` just re-evaluates and re-plots). SIGINT (Ctrl-C) or SIGTERM stop after the current
update with a checkpoint (exit status 128 + the signal number), and say how to continue: the
same command with ``--resume`` (``make demo RESUME=1`` under make; :mod:`marft_agents.hints`
builds every command the CLI prints, so that each works as pasted). ``--set section.key=value``
overrides any config field (the value is parsed as YAML: ``--set schedule.num_updates=5``).

A mistake of the user (a bad config value, a missing file, a bad flag) prints one line saying
what was expected and how to fix it (the nearest valid key, option, profile or env id when one is
close), with exit status 2; a traceback means a bug, and ``marft --debug ...`` shows the
traceback of user errors too. The config is read and validated before anything heavy is
imported (it is plain data), so such a line comes at once; so are the checks that need the env
but no model (:func:`marft_agents.env_check.check_before_loading`: env and ``eval.env_kwargs``,
scripted seats, ``init_adapters``, and whether the model is on this machine), which ``marft
train``, ``marft eval`` and ``marft config --config`` share, and ``--checkpoint``. Output cut short by its reader
(``marft config --show | head``) ends quietly, with the shell's status for SIGPIPE.

Without the ``agents`` extra (torch, transformers, peft) ``marft envs`` and ``marft score`` with a
scripted policy work; ``marft config`` lists and checks configs; ``marft train``, ``eval`` and
``score`` of a config policy say in one line how to install the extra (exit status 2). This
module imports torch-using modules only inside the subcommands that need them.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

# Only torch-free modules at import time: without the ``agents`` extra (torch, transformers, peft)
# ``marft envs`` and ``marft score`` with a scripted policy still work, and the subcommands that
# need a model say which extra to install (``main``). ConfigError lives in the torch-free schema
# module (``marft_agents.config`` re-exports it); UsageError and the ``--set`` parsing in
# ``cli_args``, which ``score`` (the ``marft score`` subcommand) shares.
from marft_agents import hints
from marft_agents.cli_args import UsageError, parse_overrides
from marft_agents.config_schema import ConfigError

if TYPE_CHECKING:  # the config loads where a command needs it
    from marft_agents.config import TrainConfig

USER_ERROR_EXIT = 2
INTERRUPTED_EXIT = 130
"""Exit status of a ``marft`` stopped at once by SIGINT (the shell's 128 + 2)."""
BROKEN_PIPE_EXIT = 141
"""Exit status when the reader of the output went away (``| head``): the shell's 128 + SIGPIPE."""

AGENTS_EXTRA_MODULES = frozenset({"torch", "transformers", "peft", "gguf", "tqdm", "matplotlib", "tensorboard"})
"""Top-level modules of the ``agents`` extra (``pip install 'marft[agents]'``): a subcommand that
fails to import one says so in one line instead of a traceback (:func:`hints.install_agents_hint`)."""


USER_ERRORS: tuple[type[BaseException], ...] = (UsageError, ConfigError, FileNotFoundError, FileExistsError)
"""Exceptions that mean "the user asked for something that cannot be done": one line, exit 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (``marft eval: error: ...; see marft eval --help``). An
    unknown option is named as such, with the nearest known one (``--confg``: did you mean
    ``--config``?), even where argparse would first complain that a required option is missing."""

    _words: list[str] = []

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        prog = self.prog
        if message.startswith(("the following arguments are required", "unrecognized arguments")):
            prog, message = self._unknown_option() or (prog, message)
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:  # a misspelt subcommand or choice: the nearest one
            close = difflib.get_close_matches(choice[1], re.findall(r"'([^']*)'", choice[2]), n=1, cutoff=0.6)
            message += f"; did you mean {close[0]!r}?" if close else ""
        self.exit(USER_ERROR_EXIT, f"{prog}: error: {message} (see {prog} --help)\n")

    def _unknown_option(self) -> tuple[str, str] | None:
        """(the command, "unrecognized option '--confg'; did you mean '--config'?") for the first
        option word that neither this parser nor the subcommand chosen knows (nor abbreviates)."""
        prog, known = self.prog, set(self._option_string_actions)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = next((w for w in self._words if w in action.choices), None)
                if chosen is not None:
                    prog = action.choices[chosen].prog
                    known |= set(action.choices[chosen]._option_string_actions)
        for word in self._words:
            name = word.split("=", 1)[0]
            if not name.startswith("--") or name == "--" or any(k.startswith(name) for k in known):
                continue
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            return prog, f"unrecognized option {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")
        return None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def _load(args: argparse.Namespace, extra: dict[str, Any] | None = None, *, model: bool = True):
    """The validated config of ``args`` and its env's agent ids, after every check that needs no
    model (:func:`~marft_agents.env_check.check_before_loading`, the same for train, eval and
    config; ``model``: also whether the model can load here)."""
    from marft_agents.config import load_config
    from marft_agents.env_check import check_before_loading

    cfg = load_config(args.config, {**parse_overrides(args.set), **(extra or {})})
    return cfg, check_before_loading(cfg, model=model)


def _resume_hint(args: argparse.Namespace) -> str:
    """The command that continues the run ``marft train`` was started for, as typed with ``--resume``."""
    chosen = (("--no-eval-before", not args.eval_before), ("--no-tensorboard", args.no_tensorboard),
              ("--quiet", args.quiet))
    flags = [flag for flag, on in chosen if on]
    return hints.resume_hint(args.config, args.set, args.output_dir, flags)


def _refuse_used_output_dir(cfg: TrainConfig, args: argparse.Namespace) -> None:
    """A fresh run into an ``output_dir`` with checkpoints is refused (before the model loads),
    saying how to continue it, or, when that run is finished, how to start over."""
    from marft_agents.run.checkpoint import latest_checkpoint

    found = latest_checkpoint(cfg.output_dir)
    if found is None:
        return
    meta = found / "meta.json"
    counters = json.loads(meta.read_text(encoding="utf-8")).get("counters", {}) if meta.is_file() else {}
    if counters and cfg.schedule.done(counters):
        raise FileExistsError(f"{cfg.output_dir} holds a finished run (latest checkpoint {found.name}); to train "
                              f"again from scratch, {hints.start_over_hint(cfg.output_dir)} (--resume would only "
                              "re-evaluate and re-plot it)")
    raise FileExistsError(f"{cfg.output_dir} already holds checkpoints of a run (latest: {found.name}); continue "
                          f"it with {_resume_hint(args)}, or to start afresh {hints.start_over_hint(cfg.output_dir)}")


def cmd_train(args: argparse.Namespace) -> int:
    cfg, _ = _load(args, {"output_dir": args.output_dir} if args.output_dir else None)
    # the config is valid: only now the modules that import torch, transformers and peft
    from marft_agents.runtime.distributed import process_group
    from marft_agents.run.session import STOP_STATUS, SessionOptions, run_session
    from marft_agents.run.trainer import prepare_trainer

    if not args.resume:
        _refuse_used_output_dir(cfg, args)
    # Under torchrun (docs/distributed.md): join the job; ranks other than 0 log warnings only.
    with process_group() as world:
        if not world.is_main:
            logging.getLogger().setLevel(logging.WARNING)
        # refuses a used output_dir before loading the model; the block's end closes the sampling engine
        with prepare_trainer(cfg, args.resume, None) as trainer:
            outcome = run_session(trainer, SessionOptions(
                resume=args.resume, eval_before=args.eval_before, tensorboard=not args.no_tensorboard,
                progress=not args.quiet, config_source=str(args.config), say=print, resume_hint=_resume_hint(args)))
    if outcome.stopped_by is not None:
        return STOP_STATUS[outcome.stopped_by]
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from marft_agents.env_check import resolve_checkpoint

    cfg, agent_ids = _load(args)
    checkpoint = resolve_checkpoint(cfg.output_dir, args.checkpoint)  # before torch and the (slow) model load
    # the config is valid: only now the modules that import torch, transformers and peft
    from marft_agents.run.checkpoint import load_adapters
    from marft_agents.evaluation.problem_set import evaluate
    from marft_agents.run.session import describe, eval_dict
    from marft_agents.run.trainer import load_policy, scripted_seats

    cfg.resolve_hardware()
    env_kwargs = {**cfg.env.kwargs, **cfg.eval.env_kwargs}
    with load_policy(cfg, agent_ids) as policy:  # the block's end closes the sampling engine
        if checkpoint is not None:
            policy.load_adapter_state_dict(load_adapters(checkpoint))
            print(f"loaded adapters from {checkpoint}")
        else:
            print("evaluating the untrained policy (adapters at initialisation = the base model)")
        # the config's decoding (eval.greedy, as in training's evaluations), and sampled too with --sampled
        modes = ([True] + ([False] if args.sampled else [])) if cfg.eval.greedy else [False]
        report = {}
        for greedy in modes:
            name = "greedy" if greedy else "sampled"
            result = evaluate(policy, cfg.env.id, env_kwargs, n_problems=args.n or cfg.eval.n_problems,
                              greedy=greedy, seed=cfg.eval.seed if args.seed is None else args.seed,
                              samples_per_problem=1 if greedy else cfg.eval.samples_per_problem,
                              sampling=cfg.sampling, num_envs=cfg.eval.num_envs,
                              progress=None if args.quiet else f"{name} eval",
                              scripted=scripted_seats(cfg, agent_ids))
            report[name] = eval_dict(result)
            if args.transcripts:
                path = Path(args.transcripts)
                path = path if len(modes) == 1 else path.with_name(f"{path.stem}.{name}{path.suffix}")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("".join(json.dumps(task) + "\n" for task in result.per_task), encoding="utf-8")
                print(f"{name:>7}: transcripts of every problem in {path}")
            print(f"{name:>7}: {describe(result)}, mean reward {result.mean_reward:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    import marft_envs

    if args.verbose:
        from marft_agents.score import print_env_details

        return print_env_details()
    for env_id in marft_envs.list_envs():
        print(env_id)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """List the keys; with ``--config``, the file's values after the checks ``marft train`` and
    ``marft eval`` run before loading a model (the env, ``eval.env_kwargs``, scripted seats,
    ``init_adapters``). Whether the model is on this machine is a note, not an error: a config
    names a model for the machine it is meant for (a GPU's Qwen2.5)."""
    from marft_agents.config import describe_config

    cfg = _load(args, model=False)[0] if args.config else None
    column = "value" if cfg is not None else "default"
    for key, type_name, value, doc in describe_config(cfg):
        print(f"{key}: {type_name} ({column}: {json.dumps(value, default=str)})")
        if args.show and doc:
            print(textwrap.indent(textwrap.fill(" ".join(doc.split()), width=96), "    "))
    if cfg is not None:
        from marft_agents.model.source import ModelNotFoundError, check_model_source

        for name, model in cfg.team_models().items():  # a team's further models too (models:)
            try:
                check_model_source(model)
            except (ModelNotFoundError, FileNotFoundError) as err:
                where = "" if name == "default" else f"models.{name}: "
                print(f"marft config: note: not loadable on this machine: {where}{err}", file=sys.stderr)
        print(f"{args.config}: valid (the checks marft train and marft eval run before loading a model)",
              file=sys.stderr)
    return 0


def _add_debug(parser: argparse.ArgumentParser) -> None:
    """``--debug`` on a subcommand too (``marft train --debug`` as well as ``marft --debug train``)."""
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of user errors (a traceback without it means a bug)")


def add_subcommand(sub: Any, name: str, func: Any, **kwargs: Any) -> argparse.ArgumentParser:
    """Add a subcommand that runs ``func(args)`` (returning the exit status), with ``--debug``."""
    parser = sub.add_parser(name, **kwargs)
    _add_debug(parser)
    parser.set_defaults(func=func)
    return parser


COMMANDS_GROUP = "marft.commands"
"""Entry-point group of subcommands that live above marft_agents (``marft benchmark`` is
``baselines.benchmark:main``): each is ``main(argv) -> exit status``, loaded only when run, so this
package never imports the layers built on it."""


def plugin_commands() -> dict[str, Any]:
    """Name -> entry point of each ``marft.commands`` subcommand (the first of a name wins; a name
    of a built-in subcommand is ignored)."""
    from importlib.metadata import entry_points

    found: dict[str, Any] = {}
    for ep in entry_points(group=COMMANDS_GROUP):
        if ep.name not in ("train", "eval", "envs", "config", "score"):
            found.setdefault(ep.name, ep)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="marft", description="Multi-agent reinforcement fine-tuning of LLM agents.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of user errors too")
    sub = parser.add_subparsers(dest="command", required=True)
    train = add_subcommand(sub, "train", cmd_train, help="train as configured, then evaluate and plot")
    train.add_argument("--config", required=True, help="YAML config (see baselines/configs/)")
    train.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in output_dir")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    train.add_argument("--output-dir", help="override output_dir")
    train.add_argument("--no-eval-before", dest="eval_before", action="store_false",
                       help="skip evaluating the untrained policy first")
    train.add_argument("--no-tensorboard", action="store_true")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    ev = add_subcommand(sub, "eval", cmd_eval, help="accuracy +- standard error on a fixed problem set")
    ev.add_argument("--config", required=True)
    ev.add_argument("--checkpoint", default="latest", help="checkpoint folder, 'latest' or 'best' (in output_dir) or 'none'")
    ev.add_argument("--n", type=_positive_int, help="number of problems (default: eval.n_problems)")
    ev.add_argument("--seed", type=int, help="problem-set seed (default: eval.seed)")
    ev.add_argument("--sampled", action="store_true",
                    help="also evaluate with sampling, one play per problem; with "
                         "eval.greedy: false the evaluation is sampled only")
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--json", help="write the report to this file")
    ev.add_argument("--transcripts", metavar="PATH.jsonl",
                    help="write one JSON line per problem (solved, reward, what each agent said); "
                         "with --sampled, PATH.greedy.jsonl and PATH.sampled.jsonl")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    envs = add_subcommand(sub, "envs", cmd_envs, help="list registered environments")
    envs.add_argument("--verbose", action="store_true", help="also show agents, default profile and package")
    conf = add_subcommand(sub, "config", cmd_config, help="list every config key with its type and default")
    conf.add_argument("--show", action="store_true", help="also print each key's documentation")
    conf.add_argument("--config", help="show the values of this YAML config instead of the defaults, after the "
                      "checks marft train and eval run before loading a model (exit 2 with one line if one fails)")
    conf.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    from marft_agents.score import add_score_parser

    add_score_parser(sub)
    for name, ep in plugin_commands().items():  # listed in --help; _main hands them their arguments
        sub.add_parser(name, help=f"{ep.value} (see marft {name} --help)", add_help=False)
    return parser


def _quiet_noisy_loggers() -> None:
    # bm25s (WebShop's search) sets its logger to DEBUG when imported, after this runs, and logs
    # routine index building: a filter (which its setLevel does not undo) keeps warnings only.
    logging.getLogger("bm25s").addFilter(_warnings_and_worse)


def _warnings_and_worse(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


def main(argv: list[str] | None = None) -> int:
    """Run ``marft`` with ``argv`` (default: the command line); returns the exit status.

    As the command (``argv`` None), an interrupt (Ctrl-C before the run's handlers are in place,
    or a second SIGINT) prints one line and returns :data:`INTERRUPTED_EXIT`; called with ``argv``
    from Python (``baselines/run.py``, the grid), the ``KeyboardInterrupt`` reaches the caller."""
    try:
        return _main(argv)
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # some other pipe: a bug
        _discard_stdout()
        return BROKEN_PIPE_EXIT


def _stdout_closed() -> bool:
    """Whether nothing reads standard output any more (a pipe whose reader exited, ``| head``)."""
    try:
        import select

        fd = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):  # no file behind stdout, or no poll (Windows)
        return not hasattr(select, "poll")
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _fd, events in poller.poll(0))


def _discard_stdout() -> None:
    """Point standard output at the null device, so the interpreter's last flush at exit does not
    fail again (and print "Exception ignored ... BrokenPipeError")."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (AttributeError, OSError, ValueError):
        pass


def _main(argv: list[str] | None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    _quiet_noisy_loggers()
    words = list(sys.argv[1:] if argv is None else argv)
    plugins = plugin_commands()
    first = next((k for k, w in enumerate(words) if not w.startswith("-")), None)
    if first is not None and words[first] in plugins:  # e.g. marft benchmark ...: its own parser
        return plugins[words[first]].load()(words[first + 1:])
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a bad flag (one line already printed)
        return exit_.code if isinstance(exit_.code, int) else USER_ERROR_EXIT
    try:
        return args.func(args)
    except USER_ERRORS as err:
        if args.debug:
            raise
        print(f"marft {args.command}: error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    except ModuleNotFoundError as err:
        missing = (err.name or "").partition(".")[0]
        if args.debug or missing not in AGENTS_EXTRA_MODULES:
            raise
        print(f"marft {args.command} needs the agents extra (no module named {missing!r} here): "
              f"{hints.install_agents_hint()}", file=sys.stderr)
        return USER_ERROR_EXIT
    except KeyboardInterrupt as err:  # Ctrl-C at the command: one line (a second SIGINT's says what it left)
        if args.debug or argv is not None:  # called from Python: the caller owns the interrupt
            raise
        print(f"marft {args.command}: {err or 'interrupted (SIGINT)'}", file=sys.stderr)
        return INTERRUPTED_EXIT


if __name__ == "__main__":
    sys.exit(main())
