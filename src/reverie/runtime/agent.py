"""``Agent``: what to run — a model, instructions, tools and limits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reverie.core.limits import Limits
from reverie.core.settings import Settings
from reverie.core.vocabulary import DRIFT_ACTIONS, ON_LIMITS, OnLimit
from reverie.errors import UsageError
from reverie.hooks import AgentHook
from reverie.loop.finish import STRUCTURED_RESULT_TOOL
from reverie.runtime.compaction import Compaction

if TYPE_CHECKING:
    from reverie.core.content import UserContent
    from reverie.core.scope import Scope
    from reverie.models.base import Model
    from reverie.runtime.drift import DriftPolicy
    from reverie.runtime.result import RunResult
    from reverie.runtime.subagents import SubagentTool


@dataclass(frozen=True, slots=True, kw_only=True)
class Agent:
    """An agent definition. Runs record the agent's ``name``; resumes look it up by name."""

    name: str
    model: str | Model | Sequence[str | Model]
    """A model spec such as ``"openai:gpt-4.1-mini"``, or a ``Model`` instance; or a list of
    them: the primary model, then fallback models tried in order when it fails with
    ``transient`` (after its retries), ``unavailable`` or ``context_overflow``."""
    instructions: str = ""
    tools: Sequence[Any] = ()
    """``@tool`` functions and other capabilities (anything with ``descriptor`` and ``invoke``)."""
    limits: Limits = field(default_factory=Limits)
    on_limit: OnLimit = "finalize"
    family: str = "default"
    """Loop family id for interactive runs."""
    hooks: Sequence[AgentHook] = ()
    """Hooks for this agent's runs only (trusted), on top of the runtime's."""
    output_type: Any = None
    """What a run must end with (docs/output.md): a pydantic model class (``RunResult.output``
    is then an instance of it) or a JSON Schema with an object root (the validated JSON).
    ``None``: a text reply. A typed agent's ``on_limit`` is always ``"fail"``: a text summary
    cannot stand in for a typed value."""
    _typed: Any = field(default=None, init=False, repr=False, compare=False)
    compaction: Compaction | None = None
    """Replace older turns of a long conversation by a summary (docs/compaction.md); off when
    ``None``."""
    on_drift: DriftPolicy = "refuse"
    """What a resume does when this agent's instructions, tools or loop family changed since
    the run's checkpoint (docs/durability.md#drift-on-resume): ``"refuse"`` (the run fails
    ``resume_drift``, naming what changed), ``"continue"`` (the run goes on; the drift is
    recorded), or a callable given the :class:`~reverie.runtime.drift.ResumeDrift` that
    answers one of the two (sync or async)."""
    settings: Settings | None = None
    """How the model samples (temperature, output cap, stop sequences, seed, top_p), sent with
    every request of this agent's runs; a mapping of those keys is accepted. ``None``: the
    provider's defaults."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip():
            raise UsageError("Agent needs a non-empty name")
        if self.on_limit not in ON_LIMITS:
            raise UsageError("Agent.on_limit must be 'finalize' or 'fail'")
        if isinstance(self.model, list | tuple):
            if not self.model:
                raise UsageError(f"Agent {self.name!r}: model=[] names no model")
            object.__setattr__(self, "model", tuple(self.model))
        for entry in self.models:
            if isinstance(entry, str):
                if not entry.strip():
                    raise UsageError(f"Agent {self.name!r}: a model spec is empty")
            elif not callable(getattr(entry, "stream", None)):
                raise UsageError(
                    f"Agent {self.name!r}: {entry!r} is not a model; pass a spec such as "
                    "'openai:gpt-4.1-mini' or a Model instance"
                )
        if not callable(self.on_drift) and self.on_drift not in DRIFT_ACTIONS:
            raise UsageError(
                f"Agent {self.name!r}: on_drift must be 'refuse', 'continue' or a callable "
                "given the drift"
            )
        if isinstance(self.settings, Mapping):
            try:
                object.__setattr__(self, "settings", Settings(**self.settings))
            except TypeError as exc:
                raise UsageError(f"Agent {self.name!r}: settings: {exc}") from None
        elif self.settings is not None and not isinstance(self.settings, Settings):
            raise UsageError(f"Agent {self.name!r}: settings must be a Settings or None")
        if self.compaction is not None and not isinstance(self.compaction, Compaction):
            raise UsageError(f"Agent {self.name!r}: compaction must be a Compaction or None")
        seen: set[str] = set()
        for item in self.tools:
            descriptor = getattr(item, "descriptor", None)
            if descriptor is None or not callable(getattr(item, "invoke", None)):
                raise UsageError(
                    f"Agent {self.name!r}: {item!r} is not a tool; decorate the function with "
                    "@tool (from reverie import tool) or pass a capability such as an MCP tool"
                )
            if descriptor.name in seen:
                raise UsageError(f"Agent {self.name!r} has two tools named {descriptor.name!r}")
            seen.add(descriptor.name)
        if self.output_type is not None:
            from reverie.runtime.output import TypedOutput

            if STRUCTURED_RESULT_TOOL in seen:
                raise UsageError(
                    f"Agent {self.name!r}: the tool name {STRUCTURED_RESULT_TOOL!r} is reserved "
                    "for the output_type"
                )
            # Checked (and its schema built) once, here: a bad type fails at definition.
            object.__setattr__(self, "_typed", TypedOutput.of(self.output_type))
            object.__setattr__(self, "on_limit", "fail")

    @property
    def models(self) -> tuple[str | Model, ...]:
        """``model`` as a list: the primary model first, then the fallbacks."""
        if isinstance(self.model, tuple):
            return self.model
        return (self.model,)  # type: ignore[return-value]

    async def run(
        self,
        message: UserContent,
        *,
        scope: Scope | None = None,
        thread_id: str | None = None,
        store: str | None = None,
    ) -> RunResult:
        """Run one turn of this agent on the embedded default runtime and wait for its result.

        The shortest program::

            from reverie import Agent

            agent = Agent(name="assistant", model="openai:gpt-4.1-mini")
            print(agent.run_sync("Hello!").text)

        It opens ``Runtime.open(store)`` (default: SQLite under ``$REVERIE_HOME``, the CLI's
        store, so ``reverie runs list`` shows the run), runs the turn, and closes the runtime.
        A program that runs many turns, resolves gates or serves several owners opens a
        :class:`~reverie.Runtime` itself and calls ``rt.run``.

        Args:
            message: Text, or ``reverie.Text``/``reverie.Image`` parts.
            scope: Who the run acts for; default :meth:`Scope.local` (tenant ``local``, user
                ``$USER``), as ``reverie run`` without ``--tenant``/``--user``. Multi-tenant
                code passes the owner's scope on every call.
            thread_id: Continue this conversation (``result.thread_id`` of an earlier turn).
            store: A store URL (default: ``sqlite:///$REVERIE_HOME/reverie.db``).

        A run that blocks on a gate returns ``status == "blocked"``; approve it later with
        ``reverie gates approve REF`` or ``Runtime.approve`` (with this agent registered).
        """
        from reverie.core.scope import Scope
        from reverie.runtime.runtime import Runtime

        async with Runtime.open(store, agents=[self]) as rt:
            return await rt.run(
                self, message, scope=Scope.local() if scope is None else scope, thread_id=thread_id
            )

    def run_sync(
        self,
        message: UserContent,
        *,
        scope: Scope | None = None,
        thread_id: str | None = None,
        store: str | None = None,
    ) -> RunResult:
        """:meth:`run` for code without an event loop (a script, a notebook cell without one).

        Raises:
            UsageError: called from inside a running event loop (``await agent.run(...)``
                there instead).
        """
        import asyncio

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(message, scope=scope, thread_id=thread_id, store=store))
        raise UsageError(
            "Agent.run_sync was called inside a running event loop; use await agent.run(...)"
        )

    def as_tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        max_output_bytes: int | None = None,
    ) -> SubagentTool:
        """This agent as a tool of another agent: each call runs it as a durable child run.

        The tool takes one ``input`` string (the child's user message) and answers with the
        child's final reply. The child has its own thread and transcript, runs under the
        tighter of its own limits and what the calling run has left (and its spend is charged
        to the caller), is cancelled with the caller, and surfaces its approval gates on the
        caller (docs/subagents.md).

        Example::

            researcher = Agent(name="researcher", model="openai:gpt-4.1-mini", tools=[search])
            lead = Agent(
                name="lead",
                model="openai:gpt-4.1",
                tools=[researcher.as_tool(name="research", description="Research a topic.")],
            )

        Args:
            name: The tool name the model sees (default: this agent's name, which must then
                be a valid tool name).
            description: What the model is told the tool does.
            max_output_bytes: Cap on the child's answer as the caller's model sees it.

        Raises:
            UsageError: an invalid tool name, or a non-positive ``max_output_bytes``.
        """
        from reverie.capabilities.output import DEFAULT_MAX_OUTPUT_BYTES
        from reverie.runtime.subagents import SubagentTool

        return SubagentTool(
            self,
            name=name,
            description=description,
            max_output_bytes=DEFAULT_MAX_OUTPUT_BYTES
            if max_output_bytes is None
            else max_output_bytes,
        )
