"""The ``rooftune`` command's Typer app, which gathers the commands of this package's modules, and
:func:`main`, the only place where errors become exit codes and one-line messages and where the
stop signals (SIGINT, SIGTERM, SIGHUP) end a command as Ctrl-C does."""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any

import typer

from rooftune.cli import analyze, data, fleet, machine, optimize, perfmodel, profile, tune
from rooftune.cli import sweep as sweep_cli
from rooftune.cli.options import App
from rooftune.cli.printing import err, labelled, out
from rooftune.errors import RooftuneError

app = App(
    add_completion=False,
    no_args_is_help=True,
    help="Why does my deep-learning model run this fast on this machine, and how do I make it faster?",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# In the order `rooftune --help` lists them.
app.command()(machine.machine)
app.command()(analyze.analyze)
app.command()(analyze.models)
app.command()(tune.tune)
app.command()(profile.profile)
app.command()(perfmodel.train)
app.command()(perfmodel.transfer)
app.command()(perfmodel.select)
app.command("model-convert")(perfmodel.model_convert)
app.command()(optimize.optimize)
app.command()(sweep_cli.sweep)
app.add_typer(data.data_app, name="data")
app.add_typer(fleet.fleet_app, name="fleet")
app.command(name="exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(tune.exec_)


def version_callback(value: bool) -> None:
    if value:
        import rooftune

        out.print(f"rooftune {rooftune.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """rooftune: measure the roofline, place a model on it, and make it run faster."""


def usage_line(exc: Any, argv: list[str]) -> str:
    """A usage error (click's) in one line: what was wrong, the value given for the option when
    there was one, and where the options are listed."""
    msg = str(exc.format_message()).strip().rstrip(".")
    if not msg:  # a group run without its command: click printed the group's help, and says nothing
        msg = "give a command, one of those listed above"
    # click's versions word this "No such option: --x" or "No such option '--x'": one form.
    msg = re.sub(r"^No such option: (\S+)", r"No such option '\1'", msg)
    param = getattr(exc, "param", None)
    value = None
    for opt in getattr(param, "opts", None) or []:
        if not opt.startswith("-"):
            break
        for i, tok in enumerate(argv):
            if tok == opt and i + 1 < len(argv):
                value = argv[i + 1]
            elif tok.startswith(opt + "="):
                value = tok[len(opt) + 1:]
    if value is not None:
        # The value beside the option it was given for, whichever way click's version words it
        # ("Invalid value for '--x': 'v' is not a valid float" or "...: input should be ...").
        head, sep, tail = msg.partition(": ")
        if sep:
            head = head if repr(value) in head else f"{head} {value!r}"
            tail = tail.removeprefix(f"{value!r} is ")
            msg = f"{head}{sep}{tail[:1].lower()}{tail[1:]}"
        elif repr(value) not in msg:
            msg = f"{msg} ({value!r})"
    ctx = getattr(exc, "ctx", None)
    where = getattr(ctx, "command_path", None) or "rooftune"
    # click quotes what it did not expect as given: a store URL's secrets are hidden there too
    from rooftune.store.urls import HIDDEN, url_secrets

    for secret in {s for tok in argv if "://" in tok or "?" in tok for s in url_secrets(tok)}:
        msg = msg.replace(secret, HIDDEN)
    return f"{msg[:1].lower()}{msg[1:]} (see {where} --help)"


#: Signals that end a command as Ctrl-C does, by KeyboardInterrupt in the main thread, so that the
#: same paths run: trial processes killed, the store's open transaction rolled back, temporary
#: folders removed, a partial report written.
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
#: Seconds after which a stop that Python swallowed is raised again.
RERAISE_S = 0.05


def main(argv: list[str] | None = None) -> int:
    """Entry point: the only place errors become exit codes and one-line messages. A command ended
    by one of STOP_SIGNALS exits 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
    import signal
    import threading

    received: list[int] = []

    def stop(signum: int, _frame: Any) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    def again(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    # A stop that lands while Python runs code whose exceptions it ignores (the callbacks around a
    # fork, as every trial's process start runs them) would be lost: the interrupt is raised again
    # a moment later, once that code has returned.
    previous_hook = sys.unraisablehook
    previous_alarm = signal.getsignal(signal.SIGALRM)

    def swallowed(unraisable: Any) -> None:
        if received and isinstance(unraisable.exc_value, KeyboardInterrupt):
            signal.signal(signal.SIGALRM, again)
            signal.setitimer(signal.ITIMER_REAL, RERAISE_S)
            return
        previous_hook(unraisable)

    previous = {}
    if threading.current_thread() is threading.main_thread():  # where Python runs signal handlers
        for name in STOP_SIGNALS:
            sig = getattr(signal, name)
            if signal.getsignal(sig) is not signal.SIG_IGN:  # ignored by whoever started us (nohup)
                previous[sig] = signal.signal(sig, stop)
        sys.unraisablehook = swallowed
    try:
        return _main(argv, received)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_alarm)
            sys.unraisablehook = previous_hook


def _interrupted(received: list[int], fallback: str) -> int:
    """The one line and the exit status of a command a stop signal ended (``fallback`` where no
    signal came: a KeyboardInterrupt or Abort raised otherwise)."""
    import signal

    if not received:
        err.print(fallback)
        return 130
    err.print(f"interrupted ({signal.Signals(received[0]).name}): nothing half-written was kept")
    return 128 + received[0]


def _main(argv: list[str] | None, received: list[int]) -> int:
    try:
        rc = app(args=argv, standalone_mode=False, prog_name="rooftune")
        if isinstance(rc, int) and rc:  # typer.Exit(code) inside a command, as click returns it
            # (a command that handled the stop itself, optimize's partial report, exits 130)
            return _interrupted(received, "") if rc == 130 and received else rc
    except RooftuneError as exc:
        labelled(err, "error", "red", exc)
        return 2
    except OSError as exc:
        # A file that could not be read or written past the checks made up front (a path that
        # changed under the run, a full disk): one line naming it, not a traceback.
        where = f" {exc.filename}" if exc.filename else ""
        labelled(err, "error", "red", f"cannot use{where}: {exc.strerror or exc}")
        return 2
    except KeyboardInterrupt:
        return _interrupted(received, "interrupted: nothing half-written was kept")
    except typer.Exit as exc:
        code = int(exc.exit_code or 0)
        return _interrupted(received, "") if code == 130 and received else code
    except typer.Abort:  # click's own form of a KeyboardInterrupt out of a command
        return _interrupted(received, "aborted")
    except Exception as exc:
        # Usage errors (unknown option, bad value): click's ClickException, which typer >= 0.25
        # vendors as typer._click (no `click` module installed), so recognised by what it does.
        if callable(getattr(exc, "format_message", None)) and isinstance(getattr(exc, "exit_code", None), int):
            if exc.exit_code == 0:  # type: ignore[attr-defined]
                return 0
            labelled(err, "error", "red", usage_line(exc, sys.argv[1:] if argv is None else argv))
            return int(exc.exit_code)  # type: ignore[attr-defined]
        raise
    return 0


def run() -> None:
    """Console-script wrapper around :func:`main`."""
    raise SystemExit(main())
