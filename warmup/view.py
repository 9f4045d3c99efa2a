"""What warmup shows the outside (``GET /admin/warmup``, the console): a typed view of
the registry, the budget and the totals, so callers need not reach into its parts."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from warmup.models import DeclineReason, WarmEntry
from warmup.reports import CycleReport
from warmup.residency import Residence
from warmup.tracker import ResidencySummary

if TYPE_CHECKING:  # the service's parts: a client reading this view needs none of them
    from warmup.budget import WarmBudget
    from warmup.keeper import ResidencyKeeper
    from warmup.registry import Registry
    from warmup.reports import ReportLog
    from warmup.restore import Restorer


class BudgetView(BaseModel):
    capacity_tokens: int
    share: float
    block_size: int
    per_entry_max_tokens: int
    max_tokens: int
    reason: str = Field("", description="Why this share: the KV memory tier, or a setting.")


class WarmEntryView(BaseModel):
    """A warm entry (``WarmEntry`` without its messages) with its remaining TTL."""

    model_config = ConfigDict(extra="allow")

    fingerprint: str
    doc_ids: list[str]
    queries: list[str]
    replica: str | None = None
    ttl_s: float
    hits: int
    partial: bool = Field(
        False,
        description="Longer than the per-entry share: only its first prefix_tokens of "
        "context_tokens are warm",
    )
    residency: Literal["warm", "evicted", "failover"] = Field(
        description="warm, or why it waits for a re-warm: evicted (vLLM dropped some of "
        "its blocks) or failover (its replica went down)"
    )
    kv: Residence | None = Field(
        None,
        description="What vLLM's KV events say it holds of the warmed blocks: full, partial, "
        "none or unknown (null: the server publishes no events)",
    )
    kv_resident_blocks: int | None = None
    kv_blocks: int | None = None


class ResidencyView(ResidencySummary):
    """The residency index and what the keeper did with it since start."""

    retouches: int = Field(0, description="Hot entries re-sent near the LRU tail.")
    retouch_seconds: float = 0.0
    evicted_rewarms: int = Field(0, description="Hot entries re-warmed on an eviction event.")
    mispredicted: int = Field(0, description="Chats whose cached tokens the index did not predict.")


class WarmupView(BaseModel):
    entries: list[WarmEntryView]
    warm_tokens: int
    budget: BudgetView | None
    pending_changes: int
    warm_requests_sent: int
    last_report: CycleReport | None
    declined: dict[DeclineReason, int] = Field(
        default_factory=dict,
        description="Contexts warmup did not warm since start, by reason (over_budget, "
        "kv_full, no_budget, no_full_block)",
    )
    truncated: int = Field(
        0, description="Contexts since start warmed only up to the per-entry share."
    )
    residency: ResidencyView | None = Field(
        None, description="From vLLM's KV events (null: no server publishes them)."
    )


def entry_view(
    entry: WarmEntry, restorer: Restorer, keeper: ResidencyKeeper | None, now: float
) -> WarmEntryView:
    pending = restorer.pending(entry.fingerprint)
    kv = keeper.tracker.state(entry.fingerprint) if keeper is not None else None
    return WarmEntryView.model_validate(
        {
            **entry.model_dump(exclude={"messages"}),
            "ttl_s": round(entry.expires_at - now, 1),
            "partial": entry.partial,
            "residency": pending.value if pending else "warm",
            "kv": kv.state if kv else None,
            "kv_resident_blocks": kv.resident_blocks if kv else None,
            "kv_blocks": kv.blocks if kv else None,
        }
    )


def residency_view(keeper: ResidencyKeeper | None) -> ResidencyView | None:
    if keeper is None:
        return None
    return ResidencyView(
        **keeper.tracker.summary().model_dump(),
        retouches=keeper.retouches,
        retouch_seconds=round(keeper.budget.spent_s, 3),
        evicted_rewarms=keeper.evicted_rewarms,
        mispredicted=keeper.mispredicted,
    )


def budget_view(budget: WarmBudget | None) -> BudgetView | None:
    if budget is None:
        return None
    return BudgetView.model_validate({**asdict(budget), "max_tokens": budget.max_tokens})


def describe(
    registry: Registry,
    restorer: Restorer,
    budget: WarmBudget | None,
    pending_changes: int,
    warm_requests_sent: int,
    reports: ReportLog,
    keeper: ResidencyKeeper | None = None,
) -> WarmupView:
    now = time.time()
    return WarmupView(
        entries=[entry_view(e, restorer, keeper, now) for e in registry.entries()],
        warm_tokens=registry.warm_tokens(),
        budget=budget_view(budget),
        pending_changes=pending_changes,
        warm_requests_sent=warm_requests_sent,
        last_report=reports.last,
        declined=reports.totals.declined,
        truncated=reports.totals.truncated,
        residency=residency_view(keeper),
    )
