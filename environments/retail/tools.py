"""Retail tools that need code: placing an order moves stock and creates an order."""

from __future__ import annotations

from typing import Any

from envgym.world import ToolError, WorldState, next_key


def place_order(state: WorldState, user_id: str, product_id: str, quantity: int) -> dict[str, Any]:
    user = state.get("users", user_id)
    if user is None:
        raise ToolError(f"no user with id {user_id}")
    product = state.get("products", product_id)
    if product is None:
        raise ToolError(f"no product with id {product_id}")
    if product["stock"] < quantity:
        raise ToolError(f"only {product['stock']} of {product_id} in stock, cannot order {quantity}")
    product["stock"] -= quantity
    orders = state.table("orders")
    order_id = next_key(orders, "#W")
    order = {
        "order_id": order_id,
        "user_id": user_id,
        "items": [product_id] * quantity,
        "status": "pending",
        "address": user["address"],
        "total": round(product["price"] * quantity, 2),
    }
    orders[order_id] = order
    return order
