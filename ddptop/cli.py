"""Command line: ``ddptop [run] ...``, ``watch``, ``view``, ``report``, ``diff``, ``plot``, ``gpus``, ``topo``,
``kernels``, ``doctor``.

Exit codes: 0 success, 1 a configuration failed, 2 bad input, 130 interrupted.
Bad input is one line on stderr (``ddptop: error: ...``), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, NoReturn

from ddptop import __version__
from ddptop.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, DdptopError, UsageError
from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT
from ddptop.protocol import variants
from ddptop.protocol.layout import PLAN_FILE, TIMELINE_FILE, run_file
from ddptop.report import diff as diff_mod
from ddptop.report import csv_table, plots, sections, store
from ddptop.report.schema import Summary
from ddptop.report.sections import saved_line
from ddptop.report.store import SummaryError
from ddptop.run import cluster as cluster_mod
from ddptop.run import rundir
from ddptop.run.options import DEFAULT_FPS, add_run_arguments, merge_plan_options
from ddptop.run.plan_file import read_plan_file
from ddptop.run.signals import handle_stop_signals
from ddptop.telemetry.allocation import usable_cpu_count
from ddptop.telemetry.fake.nodes import ProfileError, load_profile
from ddptop.telemetry.nvml import FAKE_ENV
from ddptop.telemetry.topology import format_matrix, read_topology

# The commands import what only they need inside them (each such import says so): Textual (about 0.5 s) only
# for the commands that draw, rich for the headless run, and a sweep's or a summary's machinery only for the
# commands that run or build one, so `ddptop --help`, `diff` and `gpus` start quickly. None of them imports
# numpy, matplotlib or torch at import time.

COMMANDS = ("run", "tune", "watch", "view", "report", "diff", "plot", "gpus", "topo", "kernels", "doctor")


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``ddptop run`` flags, generated from the one option table (``ddptop.run.options``)."""

    add_run_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="ddptop",
        description="Measure and watch how distributed PyTorch (DDP) training scales on this node.",
        epilog="With no command, ddptop runs the default plan (same as 'ddptop run').",
    )
    parser.add_argument("--version", action="version", version=f"ddptop {__version__}")
    commands = parser.add_subparsers(dest="command", parser_class=OneLineParser)
    run = commands.add_parser("run", help="run a scaling sweep", usage="ddptop run [flags] [-- train.py ARGS ...]",
                              epilog="Your own training script, as it is, at every world size: ddptop run [flags] -- "
                                     "train.py ARGS (or -- -m package.module ARGS); docs/scripts.md")
    _add_run_arguments(run)
    tune = commands.add_parser(
        "tune", help="measure the DDP settings a user can change against DDP as written, and recommend what beats it",
        usage="ddptop tune [flags] [-- train.py ARGS ...]", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="variants (--variants, default all):\n" + "\n".join(
            f"  {v.name:24s} {v.what}" for v in variants.CATALOG.values() if v.name != variants.DEFAULT)
        + "\n\nYour own training script, as it is: ddptop tune [flags] -- train.py ARGS sets DDP's keywords on its "
          f"own DDP call (default: {', '.join(variants.SCRIPT_TUNE)}); docs/tune.md")
    _add_run_arguments(tune)
    watch = commands.add_parser("watch", help="the TUI following a run another ddptop is writing (e.g. in sbatch)")
    watch.add_argument("run_dir", metavar="RUN_DIR")
    view = commands.add_parser("view", help="browse a saved run in the TUI: summary, tables, charts, topology")
    view.add_argument("target", metavar="RUN_DIR|summary.json")

    for viewer in (watch, view):
        viewer.add_argument("--fps", type=float, default=DEFAULT_FPS, help=f"display refresh rate (default {DEFAULT_FPS:g})")
        viewer.add_argument("--no-mouse", action="store_true", help="leave the mouse to the terminal")
        viewer.add_argument("--ascii", action="store_true",
                            help="ASCII only (no braille, block or box-drawing characters)")
    report = commands.add_parser("report", help="print the tables of a saved run")
    report.add_argument("target", metavar="RUN_DIR|summary.json")
    report.add_argument("--format", choices=("text", "md", "csv", "json"), default="text")
    report.add_argument("--rebuild", action="store_true", help="rebuild the summary from the raw events")
    diff = commands.add_parser("diff", help="compare two runs: differing settings, step times, noise test")
    diff.add_argument("a", metavar="A", help="run directory or summary.json (the baseline)")
    diff.add_argument("b", metavar="B", help="run directory or summary.json (the candidate)")
    diff.add_argument("--format", choices=("text", "md", "json"), default="text")
    diff.add_argument("--min-effect", type=float, default=DEFAULT_MIN_EFFECT, metavar="FRACTION",
                      help="smallest change of the median called slower/faster, as a fraction (0.02: 2%%)")
    diff.add_argument("--fail-on-regression", type=float, default=None, metavar="PCT",
                      help="exit 1 when a configuration is 'slower' by more than PCT percent")
    diff.add_argument("--alpha", type=float, default=None, help=argparse.SUPPRESS)  # deprecated: ignored
    plot = commands.add_parser("plot", help="(re)draw a run's plots as PNG and SVG")
    plot.add_argument("target", metavar="RUN_DIR|summary.json")
    plot.add_argument("--out", metavar="DIR", help="where to write them (default: beside the summary)")
    gpus = commands.add_parser("gpus", help="one telemetry snapshot: GPUs, their processes, the host")
    gpus.add_argument("--json", action="store_true", help="machine-readable output")
    gpus.add_argument("--interval", type=float, default=0.5, help="seconds between the two readings (rates)")
    topo = commands.add_parser("topo", help="the GPU/NIC/CPU topology matrix (like nvidia-smi topo -m)")
    topo.add_argument("--json", action="store_true", help="machine-readable output")
    commands.add_parser("kernels", help="list the benchmark kernels and models")
    doctor = commands.add_parser("doctor", help="check a node before trusting a sweep on it (NVML, nvidia-smi, "
                                              "torch, P2P, a plain DDP loop, the rendezvous store)")
    doctor.add_argument("--out", metavar="DIR", default=".", help="where to write doctor.json (default: here)")
    doctor.add_argument("--skip-loop", action="store_true",
                        help="skip the comparison of ddptop's kernel with a plain DDP loop")
    doctor.add_argument("--quick", action="store_true",
                        help="launch nothing: no rendezvous store check, no DDP loop, no nccl-tests")
    doctor.add_argument("--report", metavar="FILE",
                        help="also write FILE: every answer ddptop read from the driver (NVML's raw answers behind "
                             "gpus and topo, the NICs' PCI paths), nvidia-smi topo -m and ddptop topo, in JSON; "
                             "DDPTOP_FAKE_NVML=FILE replays it as a simulated node")
    return parser


def _plan_options(args: argparse.Namespace):
    """The plan file's options (--plan) with the flags given on top."""

    return merge_plan_options(read_plan_file(args.plan) if args.plan else {}, args)


def cmd_run(args: argparse.Namespace) -> int:
    from ddptop.headless import headless_console, run_headless  # rich: a headless run only
    from ddptop.live.live_run import create_live_run  # a sweep's machinery: `run` only

    if args.telemetry_interval < 0:
        raise UsageError("--telemetry-interval must be 0 (off) or positive")
    baseline = _baseline_of(args)  # read before anything runs: a bad path costs no sweep
    cluster = _cluster(args)
    if cluster is not None and not cluster.leader:
        return run_follower(args, cluster)
    options = _plan_options(args)
    cores = None
    if cluster is not None:
        options.nnodes = cluster.nnodes
        if cluster.loopback:  # every "node" on this machine: they share its cores

            cores = max(1, usable_cpu_count() // cluster.nnodes)
    live = create_live_run(options, args.out, args.telemetry_interval, cluster, cpu_count=cores,
                           fallback_dir=args.fallback_dir, plots=args.plots, progress=_say_before_the_sweep)
    if args.headless or not _on_terminal():
        code = run_headless(live, args.fps, headless_console(args.ascii))
    else:
        from ddptop.tui.app import run_tui  # Textual: the live view only

        _ascii_if_asked(args)
        code = run_tui(live, args.fps, mouse=not args.no_mouse)
    if baseline is None or live.summary is None:
        return code
    text, failing = _diff_report(baseline, live.summary, f"{args.baseline_run} or this run", args.min_effect,
                                 args.fail_on_regression)
    try:
        compared = f"\nCompared with {args.baseline_run}:\n" + text
        if args.ascii:
            from ddptop.tui.format import ascii_of  # rich: only to print in ASCII

            compared = ascii_of(compared)
        sys.stdout.write(compared)
        sys.stdout.flush()
    except OSError:  # the terminal went away: the summary is saved, the comparison can be redone with diff
        pass
    return EXIT_FAILED if failing and code == EXIT_OK else code


def _say_before_the_sweep(line: str) -> None:
    """A phase before the sweep starts (the check of the plan's own models), as it begins: on stderr, where
    its end in bad input goes too, before the headless progress or the live view takes over."""
    print(f"ddptop: {line}", file=sys.stderr, flush=True)


def _baseline_of(args: argparse.Namespace) -> Summary | None:
    """The summary ``--baseline`` names, checked before the sweep starts."""
    if args.baseline_run is None:
        if args.fail_on_regression is not None:
            raise UsageError("--fail-on-regression needs --baseline RUN_DIR|summary.json to compare with")
        return None
    if args.fail_on_regression is not None and not args.fail_on_regression >= 0:
        raise UsageError("--fail-on-regression must be a percentage >= 0")
    if not 0 <= args.min_effect < 1:
        raise UsageError("--min-effect must be a fraction between 0 and 1 (0.02 is 2%)")
    from ddptop.report.build import load_target  # the summary's builder: commands that read a run

    return load_target(args.baseline_run)[0]


def _cluster(args: argparse.Namespace) -> Any:
    """The multi-node settings (None for one node); a multi-node run needs one shared --out for every node."""

    if args.slurm:
        found = cluster_mod.from_slurm(dict(os.environ), args.rdzv_endpoint, args.join_timeout)
        args.out = args.out or cluster_mod.slurm_run_dir(dict(os.environ))
    else:
        found = cluster_mod.from_flags(args.nnodes or 1, args.node_rank, args.rdzv_endpoint, args.join_timeout)
    if found is not None and not args.out:
        raise UsageError("a sweep on several nodes needs --out DIR, the same directory on a filesystem every node shares")
    if found is not None and args.nnodes is not None and args.nnodes != found.nnodes:
        raise UsageError(f"--nnodes {args.nnodes}, but SLURM gives {found.nnodes} nodes")
    return found


def run_follower(args: argparse.Namespace, cluster: Any) -> int:
    """Node rank > 0: follow node 0's run directory, one torchrun agent per launch that spans this node."""
    from ddptop.run.follower import Follower  # a follower node's loop: `run --node-rank K` only
    from ddptop.telemetry.monitor import Monitor  # the telemetry thread: a follower only

    follower = Follower(os.path.abspath(args.out), cluster, say=lambda line: print(line, flush=True))
    monitor = None
    with handle_stop_signals(lambda *_: follower.request_stop()):
        try:
            plan = follower.wait_for_plan()
            if args.telemetry_interval > 0:  # this node's GPUs and host, beside the leader's
                monitor = Monitor(args.telemetry_interval, run_file(follower.run_dir, TIMELINE_FILE, cluster.node_rank))
                monitor.start()
            status = follower.run(plan)
        finally:
            if monitor is not None:
                monitor.stop()
    print(f"ddptop: node {cluster.node_rank}: the sweep ended ({status})", flush=True)
    if status == "stopped":
        return EXIT_INTERRUPTED
    return EXIT_FAILED if follower.failed_launches else EXIT_OK


def _on_terminal() -> bool:
    return sys.stdout.isatty() and sys.stdin.isatty()


def _need_terminal(command: str, target: str) -> None:
    if not _on_terminal():
        raise UsageError(f"{command} needs a terminal; for text, run: ddptop report {target}")


def _ascii_if_asked(args: argparse.Namespace) -> None:
    if getattr(args, "ascii", False):
        from ddptop.tui.ascii import use_ascii  # Textual: the views only

        use_ascii()


def cmd_tune(args: argparse.Namespace) -> int:
    """``ddptop run`` with the tune plan (``ddptop.run.plan_models.tune_options``)."""
    args.tune = True
    return cmd_run(args)


def cmd_watch(args: argparse.Namespace) -> int:
    from ddptop.tui.app import DdptopApp  # Textual: `watch` only

    if not os.path.isdir(args.run_dir):
        raise UsageError(f"{args.run_dir} is not a directory")
    _ascii_if_asked(args)
    app = DdptopApp.for_recorded(args.run_dir, args.fps, open_summary="when_done")  # one-line error if not a run
    _need_terminal("watch", args.run_dir)
    app.run(mouse=not args.no_mouse)
    return _view_ended(app, args.run_dir, "the watch view")


def cmd_view(args: argparse.Namespace) -> int:
    from ddptop.report.build import load_target  # the summary's builder: commands that read a run
    from ddptop.tui.app import DdptopApp, SummaryApp  # Textual: `view` only

    _ascii_if_asked(args)
    target = args.target
    if os.path.isfile(target) and os.path.exists(os.path.join(os.path.dirname(os.path.abspath(target)), PLAN_FILE)):
        target = os.path.dirname(os.path.abspath(target))  # the summary of a run directory: open the whole run
    if os.path.isdir(target):
        app: Any = DdptopApp.for_recorded(target, args.fps, open_summary="now")
    else:
        summary, _ = load_target(target)
        app = SummaryApp(summary, {"json": target})
    _need_terminal("view", args.target)
    app.run(mouse=not args.no_mouse)
    return _view_ended(app, target if os.path.isdir(target) else os.path.dirname(os.path.abspath(target)),
                       "the summary view")


def _view_ended(app: Any, folder: str, what: str) -> int:
    """A view's exit code: 0 where it closed as asked; where it raised, its traceback to ``folder``'s
    ui-error.log, a line that says so, and ``EXIT_VIEW_FAILED``."""
    from ddptop.tui.view_failure import report  # Textual: the views only

    return report(app.failure, folder, what) if app.failure else EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from ddptop.report.build import load_target  # the summary's builder: commands that read a run

    target = args.target
    data, rebuilt = load_target(target, args.rebuild)
    saved: dict[str, str] = {}
    if rebuilt and not args.rebuild:
        from ddptop.run.snapshot import RunPhase  # a run's state: only for an unfinished run
        from ddptop.live.recorded_run import SAVE_GRACE, writer_of  # a run's state: only for an unfinished run

        state, writer = writer_of(target)
        # its writer saves the summary when the sweep ends: not ours
        if state in (RunPhase.RUNNING, RunPhase.UNKNOWN, RunPhase.SAVING):
            if state == RunPhase.SAVING:
                print(f"ddptop: the sweep in {target} ended less than {SAVE_GRACE:.0f} s ago and its ddptop ({writer}) "
                      "saves the summary: this report is built from the events and is not saved (--rebuild saves "
                      "it)", file=sys.stderr)
            else:
                runs = "still runs" if state == RunPhase.RUNNING else "may still run (on another host)"
                print(f"ddptop: the sweep in {target} has not ended and its ddptop ({writer}) {runs}: this report "
                      "is of the steps so far and is not saved (--rebuild saves it)", file=sys.stderr)
            rebuilt = False
    if rebuilt:  # a run whose ddptop died, or an asked-for rebuild: keep the result beside the events
        saved = store.save_summary(data, target)
        if "json" in saved and not saved.get("save_error"):
            store.save_plots_safely(data, target)
    renderers = {
        "text": sections.text_report,
        "md": sections.markdown,
        "csv": csv_table.csv_text,
        "json": lambda d: json.dumps(d.to_json(), indent=2) + "\n",
    }
    sys.stdout.write(_render_saved(target, lambda: renderers[args.format](data)))
    if saved.get("save_error"):  # printed in full above; say once where it went instead

        print(saved_line(data, saved).splitlines()[0], file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _render_saved(source: str, render: Any) -> Any:
    """Render a saved summary; one that passed the schema check but lacks inner fields is "damaged"."""

    try:
        return render()
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise SummaryError(f"{source} is damaged: {type(exc).__name__}: {exc}") from None


def cmd_diff(args: argparse.Namespace) -> int:
    from ddptop.report.build import load_target  # the summary's builder: commands that read a run

    if args.alpha is not None:  # the old significance test's level; the interval and --min-effect decide now
        if not 0 < args.alpha < 1:
            raise UsageError("--alpha must be between 0 and 1")
        print("ddptop diff: --alpha is deprecated and ignored; see --min-effect", file=sys.stderr)
    if not 0 <= args.min_effect < 1:
        raise UsageError("--min-effect must be a fraction between 0 and 1 (0.02 is 2%)")
    if args.fail_on_regression is not None and not args.fail_on_regression >= 0:
        raise UsageError("--fail-on-regression must be a percentage >= 0")
    (a, _), (b, _) = load_target(args.a), load_target(args.b)
    text, failing = _diff_report(a, b, f"{args.a} or {args.b}", args.min_effect, args.fail_on_regression, args.format)
    sys.stdout.write(text)
    return EXIT_FAILED if failing else EXIT_OK  # 1: a regression beyond --fail-on-regression


def _diff_report(a: Summary, b: Summary, source: str, min_effect: float, fail_pct: float | None,
                 form: str = "text") -> tuple[str, list[dict]]:
    """``ddptop diff``'s output for two summaries, and the configurations slower than ``fail_pct`` percent."""

    result = _render_saved(source, lambda: diff_mod.diff_summaries(a, b, min_effect))
    failing: list[dict] = []
    if fail_pct is not None:
        failing = diff_mod.regressions(result, fail_pct / 100)
        result["fail_on_regression"] = {"pct": fail_pct, "failing": failing}
    if form == "json":
        return json.dumps(result, indent=2) + "\n", failing
    text = diff_mod.diff_text(result, markdown=form == "md")
    if failing:
        text += f"Failing: {len(failing)} configuration(s) slower by more than {fail_pct:g}% beyond noise (the interval's low end)\n"
    return text, failing


def cmd_plot(args: argparse.Namespace) -> int:
    from ddptop.report.build import load_target  # the summary's builder: commands that read a run

    data, _ = load_target(args.target)
    out = args.out or (args.target if os.path.isdir(args.target) else os.path.dirname(os.path.abspath(args.target)))
    rundir.prepare_out_dir(out, UsageError)  # made where missing, as `run --out` and `doctor --out` do
    drawn = _render_saved(args.target, lambda: plots.save_plots(data, out))
    for path in drawn:
        print(path)
    if not drawn:
        print("ddptop plot: nothing to draw in this summary (speedup and efficiency need two world sizes)",
              file=sys.stderr)
    return EXIT_OK


def cmd_gpus(args: argparse.Namespace) -> int:
    from ddptop.telemetry.gpus_command import snapshot_text, take_snapshot  # NVML and psutil readings: `gpus` only

    if not 0 < args.interval <= 60:
        raise UsageError("--interval must be between 0 and 60 seconds")
    snap = take_snapshot(args.interval)
    sys.stdout.write(json.dumps(snap, indent=2) + "\n" if args.json else snapshot_text(snap))
    return EXIT_OK


def cmd_topo(args: argparse.Namespace) -> int:

    topo = read_topology()
    sys.stdout.write(json.dumps(topo.to_json(), indent=2) + "\n" if args.json else format_matrix(topo))
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from ddptop.doctor import FAIL, line, prepare_out, run_doctor, save  # the checks: `doctor` only

    prepare_out(args.out)
    driver_report = None
    if args.report:
        from ddptop.doctor.driver_report import add_checks, check_report_path, write_report

        check_report_path(args.report)
        driver_report = write_report(args.report)  # first: the driver's answers stay even if a check hangs
        print(f"Driver report: {args.report}", flush=True)
    checks = run_doctor(skip_loop=args.skip_loop, quick=args.quick, report=lambda c: print(line(c), flush=True))
    print(f"Saved: {save(checks, args.out)}")
    if driver_report is not None:
        add_checks(driver_report, checks, args.report)
    return EXIT_FAILED if any(c.status == FAIL for c in checks) else EXIT_OK


def cmd_kernels(_args: argparse.Namespace) -> int:
    from ddptop.protocol.catalog import TORCHVISION_MODELS, TRANSFORMER_PRESETS

    print("Kernels:")
    print("  ddp    DDP training step (forward, loss, backward with gradient allreduce, SGD step) on synthetic data")
    print()
    print("Models (torchvision, random weights; smallest --image-size):")
    for name, (family, smallest, patch) in sorted(TORCHVISION_MODELS.items()):
        extra = f", divisible by {patch}" if patch else ""
        print(f"  {name:22s} {family:12s} >= {smallest} px{extra}")
    print()
    print("Models (decoder-only transformers, torch alone, synthetic tokens; --seq-len up to the context):")
    for name, shape in TRANSFORMER_PRESETS.items():
        print(f"  {name:10s} {shape.params / 1e6:5.0f}M params  {shape.layers} layers, d={shape.d_model}, "
              f"{shape.heads} heads, vocab {shape.vocab}, context {shape.context} (default --seq-len "
              f"{shape.default_seq_len})")
    print()
    print("Your own model: --models package.module:factory, returning a Workload (model, make_batch, loss; "
          "docs/workloads.md) or an image classifier nn.Module (called with num_classes/image_size/seq_len if it "
          "takes them)")
    print("Hugging Face: --models hf:<model_type>[:key=value]... (gpt2, llama, bert, ...; random weights from the "
          "config; pip install -e \".[hf]\")")
    return EXIT_OK


def _check_fake_nvml() -> None:

    node = os.environ.get(FAKE_ENV)
    if node:
        try:
            load_profile(node)
        except ProfileError as exc:
            raise UsageError(str(exc)) from None


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """The command's arguments; for ``run`` and ``tune``, what follows ``--`` is the user's training script and
    its own arguments (``args.script``), left as they are."""
    script = None
    if argv[:1] in (["run"], ["tune"]) and "--" in argv:
        cut = argv.index("--")
        argv, script = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    if script is not None:
        args.script = script
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "run")
    try:
        args = parse_arguments(argv)
        if getattr(args, "fps", 1.0) <= 0:  # run, watch and view draw frames
            raise UsageError("--fps must be positive")
        _check_fake_nvml()
        handlers = {"run": cmd_run, "tune": cmd_tune, "watch": cmd_watch, "view": cmd_view, "report": cmd_report, "diff": cmd_diff, "plot": cmd_plot, "gpus": cmd_gpus,
                    "topo": cmd_topo, "kernels": cmd_kernels, "doctor": cmd_doctor}
        handler = handlers[args.command]
        return handler(args)
    except DdptopError as exc:
        print(f"ddptop: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ddptop: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
