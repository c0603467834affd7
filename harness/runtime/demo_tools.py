"""The demo room's builtin tools (`demo.*`), answering from the room context the platform sent."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from harness.runtime.tools import ToolContext, ToolError, ToolPermissionError, register_builtin


def _words(text: str) -> set[str]:
    return {w for w in "".join(c.lower() if c.isalnum() else " " for c in text).split() if len(w) > 2}


@register_builtin("demo.get_product_info_by_link_id")
def get_product_info_by_link_id(args: Mapping[str, Any], ctx: ToolContext) -> dict:
    product = ctx.room.product(args["link_id"])
    if product is None:
        raise ToolError(f"no product with link id {args['link_id']} in this room")
    return dict(product)


@register_builtin("demo.search_products")
def search_products(args: Mapping[str, Any], ctx: ToolContext) -> list[dict]:
    query = _words(str(args.get("query", "")))
    scored = []
    for product in ctx.room.products:
        text = " ".join(str(product.get(k, "")) for k in ("name", "category", "description"))
        score = len(query & _words(text))
        if score:
            scored.append((score, product))
    scored.sort(key=lambda pair: -pair[0])
    return [{k: p.get(k) for k in ("link_id", "name", "price", "promo_price")} for _, p in scored[:5]]


@register_builtin("demo.search_faq")
def search_faq(args: Mapping[str, Any], ctx: ToolContext) -> list[dict]:
    query = _words(str(args.get("query", "")))
    scored = sorted(((len(query & _words(f"{e.get('q', '')} {e.get('a', '')}")), e) for e in ctx.room.faq),
                    key=lambda pair: -pair[0])
    return [dict(entry) for score, entry in scored[:3] if score]


@register_builtin("demo.get_promotion")
def get_promotion(args: Mapping[str, Any], ctx: ToolContext) -> list[dict]:
    link_id = args.get("link_id")
    promotions = [dict(p) for p in ctx.room.promotions if not link_id or link_id in (p.get("link_ids") or [])]
    if link_id and ctx.room.product(link_id) is None:
        raise ToolError(f"no product with link id {link_id} in this room")
    return promotions


@register_builtin("demo.get_order_status")
def get_order_status(args: Mapping[str, Any], ctx: ToolContext) -> dict:
    order = next((o for o in ctx.room.orders if o.get("order_id") == args["order_id"]), None)
    if order is None:
        raise ToolError(f"no order {args['order_id']}")
    if order.get("viewer_id") != ctx.viewer_id:
        raise ToolPermissionError("that order belongs to another viewer")
    return dict(order)


# The coupon code is derived from (room, viewer, item, discount), so a repeated call issues the same coupon.
@register_builtin("demo.issue_coupon", idempotent=True)
def issue_coupon(args: Mapping[str, Any], ctx: ToolContext) -> dict:
    link_id, pct = args["link_id"], int(args["discount_pct"])
    if ctx.room.product(link_id) is None:
        raise ToolError(f"no product with link id {link_id} in this room")
    code = hashlib.sha256(f"{ctx.room.room_id}:{ctx.viewer_id}:{link_id}:{pct}".encode()).hexdigest()[:8].upper()
    return {"coupon_code": f"LIVE-{code}", "link_id": link_id, "discount_pct": pct, "valid_hours": 24}


@register_builtin("demo.adjust_presentation_order")
def adjust_presentation_order(args: Mapping[str, Any], ctx: ToolContext) -> dict:
    if ctx.room.product(args["link_id"]) is None:
        raise ToolError(f"no product with link id {args['link_id']} in this room")
    return {"queued": True, "link_id": args["link_id"], "position": args["position"]}
