"""GET /metrics: the service's counters in the Prometheus text format (see `agentrl.service.metrics`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from agentrl.service.metrics import CONTENT_TYPE, ServiceMetrics

router = APIRouter()


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> PlainTextResponse:
    service_metrics: ServiceMetrics = request.app.state.metrics
    text = service_metrics.render(live_sessions=len(request.app.state.sessions))
    return PlainTextResponse(text, media_type=CONTENT_TYPE)
