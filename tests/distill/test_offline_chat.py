"""The offline distiller on a chat with an assistant: the user's statements, not the markdown."""

from __future__ import annotations

from forged.distill.chat import sentences, statements
from forged.distill.offline import distil
from forged.llm.prompt import render_chunks, render_known, render_transcript
from forged.models import MemoryItem, Message, StoredInteraction

USER = (
    "Quick update on the garden project. I planted 40 tulip bulbs along the north fence "
    "last Saturday. My neighbour Priya lent me her tiller, which saved hours. "
    "Can you suggest a watering schedule? Thanks!"
)
ANSWER = """\
## A watering plan for your tulips

Great question! Here is a structured way to think about watering.

### Step 1: Check the soil

- Water deeply once a week in spring.
- Avoid watering the leaves.

| Week | Water |
|---|---|
| 1 | 2 litres |

```python
def litres(week: int) -> int:
    return 2 * week
```

**Result:** the soil test kit read pH 6.5 for the north bed.
**Recommendation:** use a soaker hose along the north fence.
Would you like a printable checklist?"""
ACCEPT = "Sounds good, let's go with the soaker hose for the north fence."


def _chat(*exchanges: tuple[str, str]) -> list[StoredInteraction]:
    return [
        StoredInteraction(
            seq,
            "user:ana",
            "s1",
            "2026-05-04T10:00:00Z",
            10,
            [Message(role="user", text=user, name="Ana"), Message(role="assistant", text=answer)],
        )
        for seq, (user, answer) in enumerate(exchanges, start=1)
    ]


def _kept(*exchanges: tuple[str, str]) -> list[tuple[str, str]]:
    memory = distil(render_transcript(_chat(*exchanges)), limit=64)
    assert memory.picks == []
    return [(f.kind, f.text) for f in memory.facts]


def test_the_users_statements_are_kept_one_sentence_each() -> None:
    """Each statement of the user's paragraph is a fact of its own, a short one with the next;
    its question and its thanks are not kept."""
    kept = [text for _, text in _kept((USER, ANSWER)) if text.startswith("Ana: ")]
    assert kept == [
        "Ana: Quick update on the garden project. I planted 40 tulip bulbs along the north fence"
        " last Saturday.",
        "Ana: My neighbour Priya lent me her tiller, which saved hours.",
    ]


def test_no_heading_bullet_table_row_code_or_advice_of_the_assistant_is_kept() -> None:
    """Of the assistant's answer only the line recording a result is kept."""
    kept = [text for _, text in _kept((USER, ANSWER)) if not text.startswith("Ana: ")]
    assert kept == ["assistant: **Result:** the soil test kit read pH 6.5 for the north bed."]


def test_the_line_the_user_accepts_is_kept_as_a_decision() -> None:
    """The user's "let's go with" keeps the assistant's line it accepts, and itself."""
    kept = _kept((USER, ANSWER), (ACCEPT, "Great choice!"))
    assert (
        "decision",
        "assistant: **Recommendation:** use a soaker hose along the north fence.",
    ) in kept
    assert ("decision", f"Ana: {ACCEPT}") in kept


def test_requests_to_the_assistant_are_not_kept() -> None:
    """A request ("Please write…", "Can you…") says nothing about the user's world."""
    asked = "Please write me a haiku about spring. Can you make it rhyme? I keep bees on my roof."
    kept = [text for _, text in _kept((asked, "Here it is."))]
    assert kept == ["Ana: I keep bees on my roof."]


def test_a_part_of_a_long_interaction_is_read_as_a_chat() -> None:
    """A chunk holding only the user's message still keeps sentences, not the whole line."""
    (item,) = _chat((USER, ANSWER))
    first = render_chunks(item, max_tokens=100)[0]
    assert 'part="1 of' in first and "assistant:" not in first
    facts = distil(first, limit=64).facts
    assert facts[0].text.startswith("Ana: Quick update on the garden project. I planted 40")


def test_the_summary_says_what_the_chat_was_about() -> None:
    """The summary names the user and the topics, and copies no line."""
    summary = distil(render_transcript(_chat((USER, ANSWER))), limit=64).summary
    assert summary.startswith("Ana talked about ")
    assert "garden" in summary and "Priya" in summary
    assert all(line not in summary for line in sentences(USER))


def test_sentences_split_after_a_closing_quote() -> None:
    """A sentence ends after its mark, a closing quote included."""
    assert sentences('Mel said: "I painted it!" It is lovely. 3 more to go.') == [
        'Mel said: "I painted it!"',
        "It is lovely.",
        "3 more to go.",
    ]


def test_a_short_sentence_is_kept_with_the_next_and_small_talk_apart() -> None:
    """ "Yeah, it's tough." alone says little: it is kept with what follows; a greeting is a
    boundary, never part of a statement."""
    said = "Hi Mel! Yeah, it's tough. So I run every morning before work to clear my head."
    assert statements(said, frozenset({"Ana"})) == [
        "Yeah, it's tough. So I run every morning before work to clear my head."
    ]


def _known(n: int, text: str) -> MemoryItem:
    at = "2026-04-01T10:00:00Z"
    return MemoryItem(n, "fact", "profile", "user:ana", None, text, 1.0, at, at, 1, 1, at, at)


def test_a_restated_value_replaces_the_known_fact_it_changes() -> None:
    """Shown "my morning run at 6:30 am", the user's "moved my morning run to 7:15 am" is a
    state replacing it; an unrelated known fact is not replaced."""
    run = _known(7, "Ana: I usually do my morning run at 6:30 am.")
    dog = _known(8, "Ana: I adopted a greyhound named Pixel.")
    said = "I moved my morning run to 7:15 am because of the new job."
    transcript = render_known([run, dog]) + render_transcript(_chat((said, "Noted.")))
    (fact,) = distil(transcript, limit=64).facts
    assert (fact.kind, fact.text, fact.replaces) == ("state", f"Ana: {said}", [7])


def test_a_quotation_stays_whole_with_its_speaker() -> None:
    """The later sentences of reported speech are the quoted speaker's: kept with the sentence
    naming them (a question among them), never alone as the user's own."""
    said = (
        'I met Gina at the fair. Gina said: "I opened my own clothing store last month. '
        'Plus, I can add dance-inspired items to my store! It is going well." '
        'Then Jon said: "Did you like it? I sold my old car for 3,000 dollars last week." '
        "I bought a new bike for the summer."
    )
    assert statements(said, frozenset({"Ana"})) == [
        'I met Gina at the fair. Gina said: "I opened my own clothing store last month. Plus,'
        ' I can add dance-inspired items to my store! It is going well."',
        'Then Jon said: "Did you like it? I sold my old car for 3,000 dollars last week."',
        "I bought a new bike for the summer.",
    ]


def test_quoted_small_talk_is_not_kept_for_naming_its_speaker() -> None:
    """`Gina said: "See you then. Bye!"` states nothing: the words saying who speaks earn no
    weight, what is quoted is weighed, and quoted news is kept as before."""
    said = (
        'Gina said: "That\'s the spirit! Bye!" Then Jon said: "Hey Ana! How are you?" '
        'Gina told me: "I opened my own clothing store last month." I bought a new bike.'
    )
    assert statements(said, frozenset({"Ana"})) == [
        'Gina told me: "I opened my own clothing store last month."',
        "I bought a new bike.",
    ]


def test_a_quote_that_opens_no_quotation_loses_nothing() -> None:
    """An inch mark, or a quotation never closed, is no quotation: the sentences after it are
    the user's own, each kept."""
    moved = "I moved to Berlin last year for a new job."
    sister = "My sister Anna lives in Lisbon and works as a nurse."
    for said in (
        f'Did you see the 12" pizza at the corner? {moved} {sister}',
        f'He said "I am so tired of the rain here? {moved} {sister}',
    ):
        assert statements(said, frozenset({"Ana"})) == [moved, sister]


def test_a_quotation_within_a_quotation_keeps_it_open() -> None:
    """A title quoted inside reported speech closes only itself: what follows in the speech is
    still the quoted speaker's."""
    said = (
        'Caroline said: "Yeah totally! "Brave" by Sara Bareilles is the song I play before '
        'every race. I ran 3 marathons this year." I moved to Berlin last year for a new job.'
    )
    assert statements(said, frozenset({"Ana"})) == [
        'Caroline said: "Yeah totally! "Brave" by Sara Bareilles is the song I play before'
        ' every race. I ran 3 marathons this year."',
        "I moved to Berlin last year for a new job.",
    ]


def test_words_before_a_quotation_are_read_in_one_pass() -> None:
    """The words saying who speaks are matched without trying every way to cut quotes and
    dashes into words: 40 of them before words that name no speaker took 4 s, 50 apostrophes
    19 s, a few more twice that, past the worker's deadline (the batch is split and run again,
    every scope's distillation waiting)."""
    marks = "'-" * 500_000
    known = f'{marks} Gina said: "See you then. Bye!" I bought a new bike in Porto last week.'
    unknown = f'{marks} My old friend from the gym said: "See you then." I bought a new bike.'
    assert statements(known, frozenset({"Ana"})) == ["I bought a new bike in Porto last week."]
    assert statements(unknown, frozenset({"Ana"})) == [unknown]
