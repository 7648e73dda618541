"""Agreement: a name or number given another's place is found in one walk over each line."""

from __future__ import annotations

from forged.text.agreement import Places, partnered, places


def _lines(*orders: list[str]) -> dict[str, list[tuple[int, Places]]]:
    """The lines holding each term, as grounding's Sources gives them."""
    index: dict[str, list[tuple[int, Places]]] = {}
    for i, order in enumerate(orders):
        for term in dict.fromkeys(order):
            index.setdefault(term, []).append((i, places(order)))
    return index


def test_places_are_each_terms_first_and_last() -> None:
    """A term said three times is first at its first place and last at its last."""
    assert places(["bob", "met", "bob", "alic", "bob"]) == {
        "bob": (0, 4),
        "met": (1, 1),
        "alic": (3, 3),
    }


def test_two_items_said_the_other_way_round_are_partnered() -> None:
    """ "Alice gave Bob a book" against "Bob gave Alice a book": Alice has Bob's place."""
    index = _lines(["bob", "gave", "alic", "book"])
    assert partnered(["alic", "gave", "bob", "book"], {"alic", "bob"}, index.__getitem__) == "alic"


def test_a_line_saying_both_orders_agrees() -> None:
    """Where a line says the items in both orders, neither order is an exchange."""
    index = _lines(["alic", "met", "bob", "later", "bob", "call", "alic"])
    assert partnered(["bob", "call", "alic"], {"alic", "bob"}, index.__getitem__) is None


def test_the_first_item_out_of_order_is_named() -> None:
    """Of three items, the first the sentence puts after a later one's place is named."""
    index = _lines(["3", "server", "stag", "20", "produc", "alic"])
    sentence = ["alic", "20", "server", "stag", "3", "produc"]
    assert partnered(sentence, {"alic", "20", "3"}, index.__getitem__) == "alic"
    assert partnered(sentence[1:], {"20", "3"}, index.__getitem__) == "20"


def test_one_line_in_the_sentences_order_is_enough() -> None:
    """An exchange is refused only when every line holding two of the items disagrees."""
    index = _lines(["bob", "gave", "alic"], ["alic", "gave", "bob"])
    assert partnered(["alic", "gave", "bob"], {"alic", "bob"}, index.__getitem__) is None


def test_a_sentence_with_one_item_is_not_checked() -> None:
    """A single name has no partner to exchange with."""
    index = _lines(["bob", "gave", "alic"])
    assert partnered(["alic", "gave", "book"], {"alic"}, index.__getitem__) is None
