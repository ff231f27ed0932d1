"""Pagination of every list route: `?page=` and `?page_size=`, totals in the X-Pagination header."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from flask_smorest import Page
from flask_smorest.pagination import PaginationParameters
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from api.blueprint import Blueprint
from store.limits import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE

Row = TypeVar("Row")


def paginate(blp: Blueprint, in_memory: bool = False) -> Any:
    """flask-smorest's pagination with skillfleet's sizes.

    `in_memory`: the view returns the whole (short) list and it is sliced here; otherwise the
    view gets `pagination_parameters` and pages in SQL with `sql_page` (or cuts a list with
    `list_page` before the costly part of showing each item).
    """
    return blp.paginate(
        Page if in_memory else None, page_size=DEFAULT_PAGE_SIZE, max_page_size=MAX_PAGE_SIZE
    )


def sql_page(
    session: Session, statement: Select[Row], pagination: PaginationParameters
) -> list[Row]:
    """One page of an ordered SELECT; the total goes into the X-Pagination header."""
    pagination.item_count = session.scalar(
        select(func.count()).select_from(statement.order_by(None).subquery())
    )
    if pagination.first_item >= (pagination.item_count or 0):
        return []  # past the end (and no offset too large for the database is ever sent)
    page = statement.offset(pagination.first_item).limit(pagination.page_size)
    return list(session.scalars(page))


def list_page(items: Sequence[Row], pagination: PaginationParameters) -> list[Row]:
    """One page of a short list already in memory, cut before each item is shown (which may cost
    a query per item); the total goes into the X-Pagination header."""
    pagination.item_count = len(items)
    return list(items[pagination.first_item : pagination.first_item + pagination.page_size])
