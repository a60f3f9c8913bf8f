"""Reading the arguments of the task's messages. A signal cannot be refused: one sent by hand
(``temporal workflow signal``) may carry anything, and a handler that raised on it would fail
every workflow task of the task from then on. So a signal reads its arguments here, where a
value of the wrong kind is logged and read as if absent; an update refuses it instead, in its
validator (``refuse_bad``), before anything changes."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from scheduling.status import ResumeMissed


def text(value: object, name: str) -> str | None:
    """A text argument (a reason, an actor); anything but a string is logged and read as absent."""
    if value is None or isinstance(value, str):
        return value
    workflow.logger.warning("signal argument %s is not text; ignored: %r", name, value)
    return None


def missed(value: object) -> ResumeMissed:
    """A resume's ``missed``; absent or unknown is ``skip`` (an unknown one is logged)."""
    if value is None:
        return ResumeMissed.SKIP
    for choice in ResumeMissed:  # a union's member arrives decoded as its plain value
        if value == choice or value == choice.value:
            return choice
    workflow.logger.warning("resume signal: unknown missed %r; read as skip", value)
    return ResumeMissed.SKIP


def refuse_bad(*, missed: object = None, **texts: object) -> None:
    """Refuse an update whose ``missed`` is unknown or whose text arguments are not text."""
    if missed is not None and missed not in {m.value for m in ResumeMissed}:
        choices = ", ".join(m.value for m in ResumeMissed)
        raise ApplicationError(f"missed must be one of {choices}, not {missed!r}",
                               type="InvalidArgument", non_retryable=True)
    for name, value in texts.items():
        if value is not None and not isinstance(value, str):
            raise ApplicationError(f"{name} must be text, not {value!r}",
                                   type="InvalidArgument", non_retryable=True)
