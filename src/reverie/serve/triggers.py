"""``POST /v1/triggers/{name}``: inbound webhooks that start a run (docs/schedules.md#triggers).

A trigger is configured by the host: the served agent it runs, the scope the run acts for (never
taken from the request) and the Standard Webhooks secret its sender signs with. A request is
authenticated by its signature instead of a bearer token:

* **Verified**: ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` are checked with
  ``standardwebhooks``; a bad or missing signature answers 401 and starts nothing.
* **Fresh**: a timestamp more than five minutes from now (the library's tolerance) answers 401,
  so a captured request cannot be replayed later.
* **Once**: the run is started under the idempotency key ``trigger:<name>:<webhook-id>``, so a
  redelivery (same webhook id) answers with the run the first delivery started.
* **Untrusted**: the JSON payload reaches the model inside the data envelope
  (:func:`reverie.core.envelope.wrap_untrusted`), substituted for ``${payload}`` in the
  trigger's input template.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reverie.config.triggers import Trigger
from reverie.core.envelope import wrap_untrusted
from reverie.serve.context import ServeContext
from reverie.serve.errors import APIError

__all__ = ["TRIGGERS_PREFIX", "Trigger", "TriggerRoutes"]

TRIGGERS_PREFIX = "/v1/triggers/"
MAX_WEBHOOK_ID = 200


class TriggerRoutes:
    """``/v1/triggers/{name}``."""

    def __init__(self, ctx: ServeContext, triggers: Mapping[str, Trigger]) -> None:
        from standardwebhooks.webhooks import Webhook

        self.ctx = ctx
        self.triggers = dict(triggers)
        for name, trigger in self.triggers.items():
            ctx.agent(trigger.agent, param=f"triggers[{name!r}].agent")
        self._verifiers = {name: Webhook(t.secret) for name, t in self.triggers.items()}

    def routes(self) -> list[Route]:
        """The route, for the app's router."""
        return [Route(TRIGGERS_PREFIX + "{name}", self.deliver, methods=["POST"])]

    async def deliver(self, request: Request) -> Response:
        """Verify, deduplicate, start: 202 {run_id, thread_id, status}."""
        from standardwebhooks.webhooks import WebhookVerificationError

        name = request.path_params["name"]
        trigger = self.triggers.get(name)
        verifier = self._verifiers.get(name)
        if trigger is None or verifier is None:
            raise APIError(404, "no such trigger", code="trigger_not_found")
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        webhook_id = headers.get("webhook-id", "")
        if len(webhook_id) > MAX_WEBHOOK_ID:
            raise APIError(400, "webhook-id is too long", code="invalid_request")
        try:
            payload: Any = verifier.verify(body, headers)
        except WebhookVerificationError:
            # One answer for a bad, missing or stale signature: nothing to probe.
            raise APIError(
                401, "the webhook signature or timestamp was not accepted", code="invalid_signature"
            ) from None
        except ValueError:
            raise APIError(422, "the webhook body is not JSON", code="invalid_request") from None
        text = json.dumps(payload, ensure_ascii=False, indent=2, sort_keys=True)
        message = string.Template(trigger.input).safe_substitute(
            trigger=name, payload=wrap_untrusted(text, source=f"webhook:{name}")
        )
        handle = await self.ctx.rt.start(
            self.ctx.agent(trigger.agent, param="agent"),
            message,
            scope=trigger.scope,
            has_actor=False,
            idempotency_key=f"trigger:{name}:{webhook_id}",
            meta={"trigger": name, "webhook_id": webhook_id},
        )
        run = await self.ctx.rt.runs.get(handle.run_id)
        return JSONResponse(
            {"run_id": run.run_id, "thread_id": run.thread_id, "status": run.status},
            status_code=202,
        )
