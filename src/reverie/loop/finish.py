"""``FinishOnTool``: a stop strategy for runs that must end by calling one tool.

Structured unbound runs (docs/unbound.md) end by calling ``structured_result``; nothing in this
strategy is specific to that tool. After a wave, a *completed* call of the tool finishes the run
with that call's result row (``Finish``). After a plain-text reply, the run may not complete: the
model gets ``max_reprompts`` reminders (``Reprompt``), then the run fails with ``failure_kind``.
With ``repair_invalid_calls`` (typed interactive runs, docs/output.md), a wave whose calls of the
tool all failed uses the same reminders.
Everything else is left to the wrapped strategy (no-progress detection by default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reverie.loop.state import LoopExecutionState
from reverie.loop.strategies import (
    Abort,
    CallResult,
    Finish,
    RepetitionStop,
    Reprompt,
    StopConditionStrategy,
    StopDecision,
)

STRUCTURED_RESULT_TOOL = "structured_result"
"""The synthetic tool a structured run ends with."""

STRUCTURED_REPAIR_PROMPT = (
    "Your last message was plain text, but this task must end with a call to the "
    "structured_result tool. Call structured_result now with your final answer as its "
    "arguments, matching its JSON schema exactly. Do not answer in text."
)
"""The one repair prompt a structured run's plain-text answer gets."""

STRUCTURED_INVALID_PROMPT = (
    "Your structured_result call did not match its JSON schema; the tool result above lists "
    "what is wrong. Call structured_result again now with corrected arguments."
)
"""The repair prompt after an invalid ``structured_result`` call (``repair_invalid_calls``)."""


@dataclass(frozen=True, slots=True)
class FinishOnTool:
    """End the run when ``tool`` completes; a text reply gets reprompts, then fails.

    The reprompt count lives in this strategy's own slot (``stop_state["reprompts"]``), so it
    survives checkpoints and resumes: a run never gets more than ``max_reprompts`` in total.
    """

    tool: str = STRUCTURED_RESULT_TOOL
    completion_kind: str = "structured"
    """The ``Completed`` kind the run ends with."""
    reprompt: str = STRUCTURED_REPAIR_PROMPT
    max_reprompts: int = 1
    failure_kind: str = "output_contract_violation"
    """Why the run fails when the reprompts are used up."""
    base: StopConditionStrategy = field(default_factory=RepetitionStop)
    """Decides everything else after a wave (no-progress detection)."""
    repair_invalid_calls: bool = False
    """Whether a wave whose calls of ``tool`` all failed (invalid arguments) is a wrong answer
    too: it uses one of the same ``max_reprompts`` (``invalid_prompt`` is added after the
    tool's error), then the run fails with ``failure_kind``. Off: such calls are bounded only
    by the run's limits and ``base``."""
    invalid_prompt: str = STRUCTURED_INVALID_PROMPT

    def after_reply(self, state: LoopExecutionState) -> StopDecision:
        """A text reply is not the result: reprompt while allowed, then fail."""
        used = int(state.stop_state.get("reprompts", 0))
        if used < self.max_reprompts:
            return Reprompt(
                prompt=self.reprompt, stop_state={**state.stop_state, "reprompts": used + 1}
            )
        return Abort(
            failure_kind=self.failure_kind,
            detail=f"the model answered in text instead of calling {self.tool} "
            f"(after {used} reminder{'s' if used != 1 else ''})",
        )

    def after_wave(
        self, state: LoopExecutionState, results: Sequence[CallResult] = ()
    ) -> StopDecision:
        """The first completed call of ``tool`` finishes the run; else ask ``base``."""
        for result in results:
            if result.name == self.tool and result.outcome == "completed":
                return Finish(completion_kind=self.completion_kind, refs=(result.ref,))
        if self.repair_invalid_calls and any(r.name == self.tool for r in results):
            used = int(state.stop_state.get("reprompts", 0))
            if used < self.max_reprompts:
                return Reprompt(
                    prompt=self.invalid_prompt,
                    stop_state={**state.stop_state, "reprompts": used + 1},
                )
            return Abort(
                failure_kind=self.failure_kind,
                detail=f"the model's {self.tool} call did not match the output schema "
                f"(after {used} reminder{'s' if used != 1 else ''})",
            )
        return self.base.after_wave(state, results)

    def describe(self) -> Mapping[str, Any]:
        """Configuration for the digest (the wrapped strategy included)."""
        base = type(self.base)
        return {
            "tool": self.tool,
            "completion_kind": self.completion_kind,
            "reprompt": self.reprompt,
            "max_reprompts": self.max_reprompts,
            "failure_kind": self.failure_kind,
            "base": {
                "class": f"{base.__module__}.{base.__qualname__}",
                "config": dict(self.base.describe()),
            },
            # Only when on: families that do not use it keep the digest they always had.
            **(
                {"repair_invalid_calls": True, "invalid_prompt": self.invalid_prompt}
                if self.repair_invalid_calls
                else {}
            ),
        }


__all__ = [
    "STRUCTURED_INVALID_PROMPT",
    "STRUCTURED_REPAIR_PROMPT",
    "STRUCTURED_RESULT_TOOL",
    "FinishOnTool",
]
