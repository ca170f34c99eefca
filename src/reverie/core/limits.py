"""``Limits``: the hard budgets of a run (docs/loop.md)."""

from __future__ import annotations

from dataclasses import dataclass

from reverie.errors import UsageError


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Hard budgets. ``None`` means unlimited (except ``max_iterations``, always bounded).

    Limits narrow the profile's limits; they can never widen them (see :meth:`narrow`).
    """

    max_iterations: int = 32
    """Iteration cap, enforced by the executor itself."""
    max_model_calls: int | None = None
    """Model calls, charged before each call is sent (retries included)."""
    max_capability_calls: int | None = None
    """Tool calls, charged as each is admitted to a wave (parallel waves included)."""
    max_calls_per_batch: int = 32
    """Fan-out of one response; calls past it get an error result."""
    wall_clock_s: float | None = None
    """Active running time (time blocked on a gate does not count)."""
    finalizer_grace_s: float = 10.0
    """After the wall clock runs out, how long the finalizer's one model call may take (never
    more than ``wall_clock_s`` itself): a run with a wall clock ends within ``wall_clock_s``
    plus this grace, whatever the model does."""
    max_usd: float | None = None
    """Spend, from the configured price table; a limit without a known price is a config error."""
    max_tokens: int | None = None
    """Input plus output tokens over the run."""
    max_resumes: int = 8
    """Crash resumes: a run whose worker died this many times and dies again fails with
    ``resume_limit`` instead of being resumed forever (each resume also costs an iteration).
    Resuming after an approval does not count."""
    max_response_bytes: int = 4 * 1024 * 1024
    """Size of one model response (UTF-8 text plus tool-call arguments as JSON); over it the
    run fails with ``invalid_model_output`` and nothing of the response is stored."""
    max_image_bytes: int = 5 * 1024 * 1024
    """Bytes of the images of one user message (all of them together, as given, before any
    encoding); a message over it is refused with :class:`~reverie.errors.ImageTooLarge` before
    anything is written. Image URLs count nothing (they are stored as URLs)."""

    def __post_init__(self) -> None:
        if self.max_iterations < 1:
            raise UsageError("Limits.max_iterations must be at least 1")
        if self.max_calls_per_batch < 1:
            raise UsageError("Limits.max_calls_per_batch must be at least 1")
        if self.max_resumes < 0:
            raise UsageError("Limits.max_resumes must not be negative")
        if self.max_response_bytes < 1:
            raise UsageError("Limits.max_response_bytes must be at least 1")
        if self.max_image_bytes < 0:
            raise UsageError("Limits.max_image_bytes must not be negative")
        for name in ("max_model_calls", "max_capability_calls", "max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise UsageError(f"Limits.{name} must not be negative")
        for name in ("wall_clock_s", "max_usd", "finalizer_grace_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise UsageError(f"Limits.{name} must not be negative")

    @property
    def finalizer_grace(self) -> float | None:
        """The finalizer's grace past the wall clock (``None``: no wall clock, no bound)."""
        if self.wall_clock_s is None:
            return None
        return min(self.finalizer_grace_s, self.wall_clock_s)

    def narrow(self, other: Limits | None) -> Limits:
        """The tighter of ``self`` and ``other`` for every budget."""
        if other is None:
            return self

        def tighter(a: float | None, b: float | None) -> float | None:
            if a is None:
                return b
            if b is None:
                return a
            return min(a, b)

        def tighter_int(a: int | None, b: int | None) -> int | None:
            value = tighter(a, b)
            return None if value is None else int(value)

        return Limits(
            max_iterations=min(self.max_iterations, other.max_iterations),
            max_model_calls=tighter_int(self.max_model_calls, other.max_model_calls),
            max_capability_calls=tighter_int(self.max_capability_calls, other.max_capability_calls),
            max_calls_per_batch=min(self.max_calls_per_batch, other.max_calls_per_batch),
            wall_clock_s=tighter(self.wall_clock_s, other.wall_clock_s),
            finalizer_grace_s=min(self.finalizer_grace_s, other.finalizer_grace_s),
            max_usd=tighter(self.max_usd, other.max_usd),
            max_tokens=tighter_int(self.max_tokens, other.max_tokens),
            max_resumes=min(self.max_resumes, other.max_resumes),
            max_response_bytes=min(self.max_response_bytes, other.max_response_bytes),
            max_image_bytes=min(self.max_image_bytes, other.max_image_bytes),
        )
