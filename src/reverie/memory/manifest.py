"""Memory provider manifests: what a provider implements, in TOML (docs/memory.md).

::

    [memory]
    name = "native"
    lanes = ["profile_read", "long_term", "record_interaction"]
    tools = ["memory_read", "memory_write", "memory_search"]

    [[memory.scheduled_ops]]
    trigger = "after_turn"
    interval_turns = 10
    [memory.scheduled_ops.pass]          # or inline: pass = { prompt = ..., tools = [...], ... }
    prompt = "prompts/memory_curation.md"  # inside the manifest's own directory
    tools = ["memory_read", "memory_write"]
    max_model_calls = 10

- ``lanes``: the lanes the host may call (``profile_read``, ``long_term``, ``short_term``,
  ``record_interaction``); the host never calls one that is not listed.
- ``tools``: the memory tools offered to the model (``memory_read``, ``memory_write``,
  ``memory_search``).
- ``[[memory.scheduled_ops]]``: upkeep the provider asks for (curation, docs/memory.md). The rules
  are checked here: ``trigger`` is a closed vocabulary (``after_turn``); exactly one of ``pass``
  and ``tool`` (``tool`` is recognised and refused as unsupported); ``interval_turns >= 2``;
  ``max_model_calls <= 16``; one op per trigger; a pass's tools are tools this manifest
  declares; only a first-party (``builtin``/``trusted``) manifest may declare a pass.

Every problem raises :class:`~reverie.errors.ConfigError` naming the source and the key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reverie.core.tomlfile import parse_toml
from reverie.errors import ConfigError
from reverie.hooks.points import FIRST_PARTY_TRUST, TrustClass

__all__ = [
    "LANES",
    "MEMORY_TOOLS",
    "Lane",
    "MemoryManifest",
    "MemoryToolName",
    "PassSpec",
    "ScheduledOp",
    "bundled_manifest",
    "check_prompt_path",
    "load_memory_manifest",
    "parse_memory_manifest",
]

Lane = Literal["profile_read", "long_term", "short_term", "record_interaction"]
LANES: Final[tuple[Lane, ...]] = get_args(Lane)
MemoryToolName = Literal["memory_read", "memory_write", "memory_search"]
MEMORY_TOOLS: Final[tuple[MemoryToolName, ...]] = get_args(MemoryToolName)
MAX_PASS_MODEL_CALLS: Final = 16
TRIGGERS: Final[tuple[str, ...]] = ("after_turn",)
"""The closed vocabulary of scheduled-op triggers."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _PassTable(_Strict):
    prompt: str
    tools: list[str] = Field(default_factory=list)
    max_model_calls: int


class _OpTable(_Strict):
    # Literal: an unknown trigger is an error, never silently dropped.
    trigger: Literal["after_turn"]
    interval_turns: int
    pass_: _PassTable | None = Field(default=None, alias="pass")
    tool: dict[str, Any] | str | None = None

    @model_validator(mode="after")
    def _one_action(self) -> _OpTable:
        if self.tool is not None:
            raise ValueError(
                "'tool' scheduled ops are not supported; declare a 'pass' instead"
                if self.pass_ is None
                else "declare exactly one of 'pass' and 'tool'"
            )
        if self.pass_ is None:
            raise ValueError("declare exactly one of 'pass' and 'tool'")
        return self


class _MemoryTable(_Strict):
    name: str
    lanes: list[Lane] = Field(default_factory=list)
    tools: list[MemoryToolName] = Field(default_factory=list)
    scheduled_ops: list[_OpTable] = Field(default_factory=list)


class _Document(_Strict):
    model_config = ConfigDict(extra="ignore", frozen=True)  # other top-level tables: not ours
    memory: _MemoryTable


_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_prompt_path(prompt: object) -> str:
    """``prompt`` if it is a relative path inside the manifest's directory.

    Raises:
        ConfigError: Empty, absolute (``/x``, ``C:\\x``, ``~``), or with a ``..`` part.
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError("prompt: must be a non-empty path relative to the manifest")
    parts = re.split(r"[\\/]", prompt)
    if (
        os.path.isabs(prompt)
        or PurePosixPath(prompt).is_absolute()
        or PureWindowsPath(prompt).drive
        or prompt.startswith(("~", "\\"))
        or ".." in parts
    ):
        raise ConfigError(
            f"prompt: {prompt!r} must be a relative path inside the manifest's own directory "
            "(no absolute path, no '..'). Fix: ship the prompt next to the manifest"
        )
    return prompt


@dataclass(frozen=True, slots=True, kw_only=True)
class PassSpec:
    """A curation pass a scheduled op runs: an unbound turn with a prompt and few tools.

    Checked when built (from TOML or in code): ``prompt`` relative and inside the manifest's
    directory, ``tools`` known memory tools without repeats, ``1 <= max_model_calls <= 16``.

    Raises:
        ConfigError: A rule is broken (the message names the field).
    """

    prompt: str
    """The pass's instructions: a path relative to the manifest's directory."""
    tools: tuple[str, ...]
    """The memory tools the pass may use (a subset of the manifest's ``tools``)."""
    max_model_calls: int
    """At most 16."""

    def __post_init__(self) -> None:
        check_prompt_path(self.prompt)
        tools = tuple(self.tools) if isinstance(self.tools, list | tuple) else None
        if tools is None:
            raise ConfigError("tools: a pass's tools must be a list of memory tool names")
        unknown = sorted(str(t) for t in tools if t not in MEMORY_TOOLS)
        if unknown:
            raise ConfigError(
                f"tools: pass tools {unknown} are not memory tools ({list(MEMORY_TOOLS)})"
            )
        if len(set(tools)) != len(tools):
            raise ConfigError("tools: a pass's tools must not repeat")
        object.__setattr__(self, "tools", tools)
        calls = self.max_model_calls
        if not _whole(calls) or not 1 <= calls <= MAX_PASS_MODEL_CALLS:
            raise ConfigError(
                f"max_model_calls: must be a whole number from 1 to {MAX_PASS_MODEL_CALLS} "
                f"(got {calls!r}): a pass is small, bounded upkeep"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledOp:
    """Upkeep a provider asks for, armed by the manifest and enabled by the operator.

    Raises:
        ConfigError: ``trigger`` is not ``after_turn``, ``interval_turns < 2``, or ``pass_``
            is not a :class:`PassSpec`.
    """

    trigger: Literal["after_turn"]
    interval_turns: int
    """Every Nth completed turn of an owner (at least 2)."""
    pass_: PassSpec

    def __post_init__(self) -> None:
        if self.trigger not in TRIGGERS:
            raise ConfigError(
                f"trigger: {self.trigger!r} is not a known trigger (known: {list(TRIGGERS)})"
            )
        if not _whole(self.interval_turns) or self.interval_turns < 2:
            raise ConfigError(
                f"interval_turns: must be a whole number of at least 2 (got "
                f"{self.interval_turns!r})"
            )
        if not isinstance(self.pass_, PassSpec):
            raise ConfigError("pass: declare exactly one of 'pass' and 'tool' (a PassSpec)")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryManifest:
    """A validated provider manifest: every construction path (TOML or code) is checked.

    Raises:
        ConfigError: A bad name; an unknown lane or tool; two ops for one trigger; pass tools
            this manifest does not declare; a pass in a manifest that is not first-party
            (``trust`` ``installed``/``self_authored``). The message names ``source``.
    """

    name: str
    lanes: frozenset[Lane]
    tools: tuple[MemoryToolName, ...]
    scheduled_ops: tuple[ScheduledOp, ...] = ()
    source: str = "<memory manifest>"
    """Where it was read from (named in errors)."""
    base_dir: str | None = None
    """The manifest's directory, against which a pass's ``prompt`` path is resolved."""
    trust: TrustClass = "trusted"
    """Where it came from (DESIGN §11): only a first-party manifest may declare a pass. Built
    in code by the application: ``trusted``."""

    def __post_init__(self) -> None:
        where = self.source
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError(f"{where}: [memory] name: 1-64 letters, digits or '_.:-'")
        lanes = frozenset(self.lanes)
        if not lanes <= set(LANES):
            raise ConfigError(
                f"{where}: [memory] lanes: unknown {sorted(lanes - set(LANES))}; known: "
                f"{list(LANES)}"
            )
        tools = tuple(dict.fromkeys(self.tools))
        if not set(tools) <= set(MEMORY_TOOLS):
            raise ConfigError(
                f"{where}: [memory] tools: unknown {sorted(set(tools) - set(MEMORY_TOOLS))}; "
                f"known: {list(MEMORY_TOOLS)}"
            )
        object.__setattr__(self, "lanes", lanes)
        object.__setattr__(self, "tools", tools)
        ops = tuple(self.scheduled_ops)
        object.__setattr__(self, "scheduled_ops", ops)
        seen: set[str] = set()
        for index, op in enumerate(ops):
            key = f"{where}: [[memory.scheduled_ops]] entry {index + 1}"
            if not isinstance(op, ScheduledOp):
                raise ConfigError(f"{key}: not a ScheduledOp")
            if op.trigger in seen:
                raise ConfigError(
                    f"{key}: a second op for trigger {op.trigger!r} (one per trigger)"
                )
            seen.add(op.trigger)
            undeclared = sorted(set(op.pass_.tools) - set(tools))
            if undeclared:
                raise ConfigError(
                    f"{key}: pass tools {undeclared} are not tools this manifest declares "
                    f"({sorted(tools)})"
                )
            if self.trust not in FIRST_PARTY_TRUST:
                raise ConfigError(
                    f"{key}: only first-party (builtin or trusted) manifests may declare a "
                    f"pass; this one is {self.trust}"
                )

    def declares(self, lane: Lane) -> bool:
        """Whether the host may call ``lane``."""
        return lane in self.lanes

    def op_for(self, trigger: str) -> ScheduledOp | None:
        """The scheduled op bound to ``trigger``, if any."""
        return next((op for op in self.scheduled_ops if op.trigger == trigger), None)


def parse_memory_manifest(
    document: Mapping[str, Any] | str,
    *,
    source: str | os.PathLike[str] = "<memory manifest>",
    trust: TrustClass = "builtin",
    base_dir: str | os.PathLike[str] | None = None,
) -> MemoryManifest:
    """Validate a memory manifest (TOML text, or an already-parsed document).

    Args:
        document: The TOML text, or the parsed document; its ``[memory]`` table is read.
        source: Where it came from, named in every error.
        trust: Where it came from decides what it may declare: only ``builtin`` and
            ``trusted`` manifests may declare a curation pass.
        base_dir: The manifest's directory (for a pass's prompt path).

    Raises:
        ConfigError: The TOML is invalid, ``[memory]`` is missing, or a rule is broken.
    """
    where = os.fspath(source)
    if isinstance(document, str):
        document = parse_toml(document, where)
    try:
        parsed = _Document.model_validate(document).memory
    except ValidationError as exc:
        # The first problem with its location; never the input values.
        error = exc.errors(include_url=False, include_input=False)[0]
        loc = ".".join(str(part) for part in error["loc"]) or "memory"
        raise ConfigError(f"{where}: [memory] {loc}: {error['msg']}") from None
    ops: list[ScheduledOp] = []
    for index, op in enumerate(parsed.scheduled_ops):
        spec = op.pass_
        assert spec is not None  # the validator guarantees it
        try:
            ops.append(
                ScheduledOp(
                    trigger=op.trigger,
                    interval_turns=op.interval_turns,
                    pass_=PassSpec(
                        prompt=spec.prompt,
                        tools=tuple(spec.tools),
                        max_model_calls=spec.max_model_calls,
                    ),
                )
            )
        except ConfigError as exc:
            raise ConfigError(
                f"{where}: [[memory.scheduled_ops]] entry {index + 1}: {exc}"
            ) from None
    return MemoryManifest(
        name=parsed.name,
        lanes=frozenset(parsed.lanes),
        tools=tuple(parsed.tools),
        scheduled_ops=tuple(ops),
        source=where,
        base_dir=os.fspath(base_dir) if base_dir is not None else None,
        trust=trust,
    )


def load_memory_manifest(
    path: str | os.PathLike[str], *, trust: TrustClass = "installed"
) -> MemoryManifest:
    """Read and validate a memory manifest file.

    A file is ``installed`` unless the caller vouches for it: an extension's manifest cannot
    declare a curation pass. Pass ``trust="trusted"`` for the application's own manifest.

    Raises:
        ConfigError: The file cannot be read or is invalid.
    """
    where = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read ({type(exc).__name__})") from exc
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    return parse_memory_manifest(
        text, source=where, trust=trust, base_dir=os.path.dirname(os.path.abspath(where))
    )


def bundled_manifest(name: str) -> MemoryManifest:
    """A manifest shipped in ``reverie/memory/manifests/`` (trust class ``builtin``)."""
    folder = resources.files("reverie.memory") / "manifests"
    text = (folder / name).read_text(encoding="utf-8")
    return parse_memory_manifest(
        text, source=f"reverie/memory/manifests/{name}", trust="builtin", base_dir=str(folder)
    )
