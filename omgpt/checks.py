"""The one validation layer for values a user can give: every command checks its numbers, devices,
task and policy options and memory needs here, before any work, so a bad value ends with one line
``omgpt: error: ...`` and exit code 2 (an :class:`OMGPTError`) instead of a traceback, a crash after
the run, or a silently wrong result.

* :func:`number` -- finite, integer where counted, in range;
* :func:`options` -- task and policy options coerced to the types their constructors declare
  (``--option noise=1e-3`` arrives from YAML as the string ``"1e-3"``) and finite, whatever their
  names (:func:`omgpt.tasks.make_task`, :func:`omgpt.policies.make_policy`);
* :func:`device` -- a torch device that exists here;
* :func:`memory` -- an estimate of what an allocation needs against what the device has free (probed
  by :func:`omgpt.machine.free_memory`), with the estimates of what a rollout (:func:`history_bytes`)
  and an evaluation's report (:func:`report_bytes`) hold;
* :func:`rollout_time` -- the rollout loop's steps (:func:`loop_steps`) against :data:`MAX_LOOP_STEPS`.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

import torch

from omgpt.errors import OMGPTError
from omgpt.machine import free_memory  # looked up here by memory(): a test stands in for it as checks.free_memory

SEED_MAX = 2**32 - 1  # what Lightning's seed_everything and numpy accept


# --------------------------------------------------------------------------------------------------
# Numbers.
def number(
    name: str,
    value: Any,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    none: bool = False,
):
    """``value`` as a finite number (an ``int`` when ``integer``) within ``[low, high]`` (an open end
    with ``low_open`` / ``high_open``), else :class:`OMGPTError` naming ``name``. Strings are parsed
    (``"1e-3"``); ``None`` passes when ``none``."""
    if value is None and none:
        return None
    try:
        parsed = _parse(value)
        x = float(parsed)
    except (TypeError, ValueError, OverflowError):
        x = math.nan
    if (
        not math.isfinite(x)
        or (integer and x != int(x))
        or (low is not None and (x <= low if low_open else x < low))
        or (high is not None and (x >= high if high_open else x > high))
    ):
        raise OMGPTError(f"{name} must be {_wanted(integer, low, high, low_open, high_open)}, got {value!r}")
    return (parsed if isinstance(parsed, int) else int(x)) if integer else x


def _parse(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError  # true is not 1 here
    if isinstance(value, str):
        try:
            return int(value)  # "12" exactly (a float would round a long integer)
        except ValueError:
            return float(value)  # "1e-3", "1e3", "nan"
    return value


def _wanted(integer: bool, low, high, low_open: bool, high_open: bool) -> str:
    kind = "integer" if integer else "number"
    if high is None and low == 0:
        return f"a {'positive' if low_open else 'non-negative'} {kind}"
    if high is None and integer and low == 1:
        return "a positive integer"
    a = "an" if integer else "a"
    if low is not None and high is not None:
        return f"{a} {kind} in {'(' if low_open else '['}{_num(low)}, {_num(high)}{')' if high_open else ']'}"
    if low is not None:
        return f"{a} {kind} {'>' if low_open else '>='} {_num(low)}"
    if high is not None:
        return f"{a} {kind} {'<' if high_open else '<='} {_num(high)}"
    return "an integer" if integer else "a finite number"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def size(name: str, value: Any, low: int = 1) -> int:
    """A count or dimension (a task's ``dim``, a number of arms, a horizon): an integer ``>= low``.
    Zero passes no size check: a zero-dimensional task would run and report meaningless numbers."""
    return number(name, value, integer=True, low=low)


def seed(name: str, value: Any) -> int:
    return number(name, value, integer=True, low=0, high=SEED_MAX)


# The largest magnitude a context, an outcome or an action given to an agent or an environment may
# have. The policies compute in float32 (whose largest number is 3.4e38): squares and sums of squares
# (least squares, a network's layer norm) of numbers past ~1e19 overflow to inf and come back as NaN
# actions. 1e8 leaves room for sums over long histories; no task's numbers come near it.
MAGNITUDE = 1e8


def inputs(what: str, t: torch.Tensor, low: float = -math.inf) -> torch.Tensor:
    """``t`` finite, within :data:`MAGNITUDE`, and ``>= low`` (a demand is never negative), else one
    line naming ``what`` and the first offending value."""
    bad = ~torch.isfinite(t) | (t.abs() > MAGNITUDE) | (t < low)
    if bool(bad.any()):
        value = float(t[bad][0])
        why = (
            "non-finite numbers"
            if not math.isfinite(value)
            else f"{value:g}, beyond the magnitude {MAGNITUDE:g} omgpt computes with (float32)"
            if abs(value) > MAGNITUDE
            else f"{value:g}, below the task's {low:g}"
        )
        raise OMGPTError(f"the {what} holds {why}")
    return t


# --------------------------------------------------------------------------------------------------
# Task and policy options.
_SCALARS = {"bool": bool, "int": int, "float": float, "str": str}


def options(cls: type, values: dict, what: str) -> dict:
    """``values`` (options of ``cls``'s constructor) coerced to the type each parameter declares --
    its annotation, else its default's type -- and checked: numbers finite, integers whole, booleans
    true/false. Values of other types (a model, a tuple) pass unchanged, their numbers checked finite."""
    out = {}
    for key, value in values.items():
        kind = _declared_type(cls, key)
        label = f"{what} option {key!r}"
        if value is None:
            pass  # "not set": the constructor's own default or check applies
        elif kind is bool:
            if not isinstance(value, bool):
                raise OMGPTError(f"{label} must be true or false, got {value!r}")
        elif kind is int:
            value = number(label, value, integer=True)
        elif kind is float:
            value = number(label, value)
        elif kind is str:
            if not isinstance(value, str):
                raise OMGPTError(f"{label} must be a string, got {value!r}")
        else:
            _finite_numbers(label, value)
        out[key] = value
    return out


def _declared_type(cls: type, key: str) -> type | None:
    """The scalar type of parameter ``key`` of ``cls.__init__`` or of a base class's (``**pool``
    options go to ``Task.__init__``); ``None`` for anything else (``int | None`` counts as ``int``)."""
    for klass in cls.__mro__:
        parameter = inspect.signature(klass.__init__).parameters.get(key) if "__init__" in vars(klass) else None
        if parameter is None:
            continue
        hint = parameter.annotation
        if hint is inspect.Parameter.empty:
            names = []
        else:
            names = [t.strip() for t in hint.split("|")] if isinstance(hint, str) else [getattr(hint, "__name__", "")]
            names = [n for n in names if n != "None"]
        if len(names) == 1 and names[0] in _SCALARS:
            return _SCALARS[names[0]]
        default = parameter.default
        if not names and default is not inspect.Parameter.empty and type(default) in _SCALARS.values():
            return type(default)
        return None
    return None


def _finite_numbers(label: str, value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise OMGPTError(f"{label} must be finite, got {value!r}")
    if isinstance(value, (list, tuple)):
        for v in value:
            _finite_numbers(label, v)
    elif isinstance(value, dict):
        for v in value.values():
            _finite_numbers(label, v)


def built(build: Callable[[], Any], what: str):
    """``build()``, with the errors a constructor raises on a bad value (a negative size, a wrong
    type) turned into one line naming ``what``."""
    try:
        return build()
    except OMGPTError:
        raise
    except (ValueError, TypeError, RuntimeError, ArithmeticError, IndexError) as e:
        raise OMGPTError(f"{what}: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from None


def finite(what: str, **tensors: torch.Tensor) -> None:
    """Every value of every tensor finite, else one line naming ``what`` and the tensor."""
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise OMGPTError(f"{what} produced non-finite {name}")


# --------------------------------------------------------------------------------------------------
# Devices and memory.
def device(name: str, what: str = "--device") -> torch.device:
    """A torch device that exists on this machine (``cpu``, ``cuda``, ``cuda:1``, ``mps``); ``what``
    names the option or argument in the error."""
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise OMGPTError(f"{what} {name!r} is not a torch device (e.g. cpu, cuda, cuda:1)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise OMGPTError(f"{what} {name}: no CUDA device is available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise OMGPTError(f"{what} {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise OMGPTError(f"{what} {name}: MPS is not available on this machine")
    elif dev.type != "cpu":
        raise OMGPTError(f"{what} {name}: only cpu, cuda and mps are supported")
    return dev


def memory(
    nbytes: float,
    what: str,
    dev: torch.device | str = "cpu",
    advice: str = "use fewer runs, a shorter horizon or a smaller batch",
) -> None:
    """Refuse, before allocating, work estimated to need more memory than ``dev`` has free."""
    free = free_memory(dev)
    if free is not None and nbytes > free:
        raise OMGPTError(
            f"{what} needs about {_size(nbytes)} of memory on {dev}, more than the {_size(free)} free; {advice}"
        )


def history_bytes(task, n: float, horizon: float) -> float:
    """An estimate of the memory a rollout of ``n`` environments for ``horizon`` steps holds: the
    History's tensors (contexts, actions, observations, optimal actions, regrets, suboptimality,
    rewards, optimal rewards) and the policy's own copy of the history, float32."""
    per_step = 2 * (task.context_dim + task.action_dim + task.obs_dim) + task.action_dim + 4
    return 4.0 * n * horizon * per_step


BOOTSTRAP_BYTES = 2**27  # the working memory of a bootstrap block (omgpt.analysis.report.bootstrap_percentiles)


def report_bytes(runs: float, horizon: float, samples: int) -> float:
    """An estimate of the memory ``omgpt evaluate``'s report needs beside the histories, for the policy
    it summarises at a time: its ``(runs, T)`` curves in float64 (cumulative regret, suboptimality, a
    percentile's copy), the bootstrap's ``(samples, runs)`` resample indices and paired means, and its
    working blocks (the ``(samples, runs, T)`` resample is never built whole); ``samples``: the bootstrap's
    resamples (``omgpt.analysis.report.BOOTSTRAP_SAMPLES``)."""
    return 8.0 * (3 * runs * horizon + 3 * samples * runs) + 2 * BOOTSTRAP_BYTES


# The rollout loop steps every batch of runs through the horizon one decision at a time (a policy's
# act and observe, the task's step), so its time grows with policies x batches x horizon, whatever the
# batch size. At 0.1 to 1 ms a step (a benchmark, OMGPT on a CPU), a million steps take minutes to a
# quarter of an hour; the paper's settings need a few hundred thousand at most. Beyond it a command
# asks for --force rather than run for hours.
MAX_LOOP_STEPS = 10**6


def loop_steps(rollouts: int, runs: int, horizon: int, batch_size: int) -> int:
    """Steps of the rollout loop for ``rollouts`` rollouts (policies, or tuning points) of ``runs``
    environments of ``horizon`` steps, ``batch_size`` environments at a time."""
    return rollouts * math.ceil(runs / batch_size) * horizon


def rollout_time(steps: int, what: str, force: bool = False) -> None:
    """Refuse, before any work, ``steps`` of the rollout loop beyond :data:`MAX_LOOP_STEPS` unless ``force``."""
    if steps > MAX_LOOP_STEPS and not force:
        raise OMGPTError(
            f"{what} takes {steps:,} steps of the rollout loop, more than the {MAX_LOOP_STEPS:,} (minutes to a quarter "
            f"of an hour) run without --force; use fewer runs or policies, a shorter horizon or a larger --batch-size, "
            f"or pass --force"
        )


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"
