"""What an unbound run persists so that any process can resume it (DESIGN §14, issue: background
work that survives crashes).

An unbound run is started through an *ephemeral agent* nobody registers in another process. So
that ``Runtime.recover()``, ``Runtime.resume()`` or a worker in a new process can continue it —
or end it cleanly — the run row carries an :class:`UnboundSpec` in ``meta["unbound"]``:

- the system prompt and the output contract;
- its **limits**, as computed when it was first submitted: every segment uses these, never the
  limits of whoever submits the same key next;
- its **model spec** (a string). A ``Model`` *instance* cannot be persisted: the run still runs
  in the process that submitted it, but another process ends it ``Failed(not_resumable)``;
- its **tools by name**, and the first-party *toolset* that builds them (e.g. the guarded
  memory tools of a curation pass). Tool objects given without a toolset only exist in the
  submitting process: elsewhere the run is ended ``Failed(not_resumable)``;
- the agent that lent it its model and hooks, if any (its policies must travel with the run:
  a lender with hooks that is not registered makes the run not resumable, never unguarded);
- the *finisher* that records the run's outcome (a curation pass's record), called in
  whichever process ends the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from reverie.core.limits import Limits
from reverie.core.vocabulary import OnLimit
from reverie.runtime.structured import OutputContract

__all__ = ["META_KEY", "UnboundSpec"]

META_KEY: Final = "unbound"
"""The key of the spec in ``RunRecord.meta``."""

_VERSION: Final = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class UnboundSpec:
    """Everything an unbound run needs to be rebuilt in another process."""

    system_prompt: str
    contract: OutputContract
    limits: Limits
    """The run's own limits (the family cap already narrowed by the declared ones)."""
    on_limit: OnLimit
    model: str | None = None
    """The model spec; ``None`` when the model was an instance (not resumable elsewhere)."""
    tools: tuple[str, ...] = ()
    """The names of the run's tools (``structured_result`` not included)."""
    toolset: str | None = None
    """The first-party toolset that builds ``tools`` for a run; ``None``: tool objects."""
    lender: str | None = None
    """The agent whose model (and hooks) the run uses, if it was submitted with ``agent=``."""
    lender_hooks: bool = False
    """Whether the lender had hooks of its own (then it must be registered to resume)."""
    finisher: str | None = None
    """The first-party finisher that records the run's outcome when it ends."""

    def to_meta(self) -> dict[str, Any]:
        """The JSON form kept in ``RunRecord.meta[META_KEY]``."""
        return {
            "v": _VERSION,
            "system_prompt": self.system_prompt,
            "contract": {
                "kind": self.contract.kind,
                "name": self.contract.name,
                "schema": dict(self.contract.schema) if self.contract.schema is not None else None,
            },
            "limits": dataclasses.asdict(self.limits),
            "on_limit": self.on_limit,
            "model": self.model,
            "tools": list(self.tools),
            "toolset": self.toolset,
            "lender": self.lender,
            "lender_hooks": self.lender_hooks,
            "finisher": self.finisher,
        }

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> UnboundSpec | None:
        """The spec a run row carries (``None``: a run started before specs were kept)."""
        data = meta.get(META_KEY)
        if not isinstance(data, Mapping) or data.get("v") != _VERSION:
            return None
        contract = data["contract"]
        return cls(
            system_prompt=str(data["system_prompt"]),
            contract=OutputContract(
                kind=contract["kind"], name=contract.get("name"), schema=contract.get("schema")
            ),
            limits=Limits(**data["limits"]),
            on_limit=data["on_limit"],
            model=data.get("model"),
            tools=tuple(data.get("tools") or ()),
            toolset=data.get("toolset"),
            lender=data.get("lender"),
            lender_hooks=bool(data.get("lender_hooks")),
            finisher=data.get("finisher"),
        )
