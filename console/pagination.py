"""Pages of a list from the `page` query parameter, with a message when the parameter names no page.

Django's `Paginator.get_page` turns `page=abc`, `page=0` or `page=99` into page 1 or the last page without a
word, so a shared link that points nowhere shows other rows as if they were the ones asked for. Here a bad
value gives an empty page and a sentence saying which pages exist; the view answers 422.
"""

from dataclasses import dataclass

from django.core.paginator import Page, Paginator

PER_PAGE = 50


@dataclass(frozen=True)
class PageRequest:
    page: Page
    error: str | None  # a sentence for the operator when `page` named no page; the page is then empty


def page_from_query(query, object_list, *, per_page: int = PER_PAGE) -> PageRequest:
    """The page of `object_list` that `query["page"]` asks for (blank: the first), or an empty one and why."""
    paginator = Paginator(object_list, per_page)
    text = str(query.get("page") or "").strip()
    if not text:
        return PageRequest(paginator.page(1), None)
    last = paginator.num_pages
    pages = "there is only page 1" if last == 1 else f"pages run from 1 to {last}"
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        shown = text if len(text) <= 40 else text[:40] + "…"
        return PageRequest(Page([], 1, paginator), f"Page: “{shown}” is not a page number; {pages}.")
    number = int(text)
    if number > last:
        return PageRequest(Page([], last, paginator), f"Page: there is no page {number}; {pages}.")
    return PageRequest(paginator.page(number), None)
