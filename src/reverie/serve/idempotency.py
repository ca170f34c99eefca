"""``Idempotency-Key``: a client's retry of a request gets the run the first attempt started.

The header's value becomes the runtime's idempotency key (per owner, DESIGN §14), namespaced by
the route, so the same key on ``/v1/chat/completions`` and ``/v1/runs`` names two runs. The
first request's body is fingerprinted onto its run: the same key with another body is refused
(422) instead of answering with a run the client did not ask for.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.requests import Request

from reverie.core.canonical import digest
from reverie.serve.errors import APIError
from reverie.store.base import RunRecord

__all__ = ["IDEMPOTENCY_HEADER", "Idempotency", "idempotency_of"]

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 255
_REQUEST_META = "http_request"
"""``RunRecord.meta`` key holding the fingerprint of the request that started a keyed run."""


class Idempotency:
    """The key of one request and the fingerprint of its body."""

    def __init__(self, key: str, fingerprint: str) -> None:
        self.key = key
        """The runtime's idempotency key (route and client key)."""
        self.fingerprint = fingerprint

    @property
    def meta(self) -> dict[str, Any]:
        """What the run started by this request stores about it."""
        return {_REQUEST_META: self.fingerprint}

    def check(self, run: RunRecord) -> None:
        """Refuse a run that an earlier request with another body started under this key.

        Raises:
            APIError: 422 ``idempotency_key_reused``.
        """
        stored = run.meta.get(_REQUEST_META)
        if stored is not None and stored != self.fingerprint:
            raise APIError(
                422,
                f"this {IDEMPOTENCY_HEADER} was already used with a different request "
                f"(run {run.run_id}); use a new key for a new request",
                code="idempotency_key_reused",
                param=IDEMPOTENCY_HEADER,
            )


def idempotency_of(request: Request, body: BaseModel, *, route: str) -> Idempotency | None:
    """The request's :class:`Idempotency`, or ``None`` without the header.

    Raises:
        APIError: 400 for an empty, over-long or non-printable key.
    """
    raw = request.headers.get(IDEMPOTENCY_HEADER)
    if raw is None:
        return None
    key = raw.strip()
    if not key or len(key) > MAX_KEY_CHARS or not key.isprintable():
        raise APIError(
            400,
            f"{IDEMPOTENCY_HEADER}: use 1 to {MAX_KEY_CHARS} printable characters",
            code="invalid_idempotency_key",
            param=IDEMPOTENCY_HEADER,
        )
    fingerprint = digest(body.model_dump(mode="json", by_alias=True))
    return Idempotency(f"http:{route}:{key}", fingerprint)
