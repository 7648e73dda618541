"""Distortion probes: what a distorting model writes from a line, by family, and faithful
paraphrases of lines like them. Each probe is (what was said, the fact); "user" is the user.

The grounding check (forged.text.grounding) should refuse the distortions and keep the
paraphrases; `python -m bench.grounding` reports both by family, and tests/text/test_grounding.py
holds the check to its goals (DISTORTIONS_REFUSED, FAITHFUL_KEPT).
"""

from __future__ import annotations

__all__ = ["DISTORTIONS", "DISTORTIONS_REFUSED", "FAITHFUL", "FAITHFUL_KEPT", "OUT_OF_REACH"]

DISTORTIONS_REFUSED = 0.90  # the goal: the share of distortions refused
FAITHFUL_KEPT = 0.95  # and of faithful paraphrases kept

# A data table, one probe a line: the formatter would reflow its rows.
DISTORTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "contraction without apostrophe": (
        ("user: I dont eat pork.", "The user eats pork."),
        ("user: My sister doesnt live in Berlin.", "The user's sister lives in Berlin."),
        ("user: I cant swim.", "The user can swim."),
        ("user: We wont renew the Oracle licence.", "The team will renew the Oracle licence."),
        ("user: The staging server isnt ready.", "The staging server is ready."),
        ("user: I didnt finish the marathon.", "The user finished the marathon."),
    ),
    "negation an idiom swallowed": (
        ("user: I don't miss London at all.", "The user misses London."),
        ("user: I'm not too keen on sushi.", "The user is keen on sushi."),
        ("user: I don't believe in astrology.", "The user believes in astrology."),
        ("user: I don't mind working weekends.", "The user minds working weekends."),
        ("user: Not everyone on the team uses Linux.", "Everyone on the team uses Linux."),
        ("user: My manager is not so happy with the release.", "The user's manager is happy with the release."),
    ),
    "negative word outside the list": (
        ("user: I hardly ever drink coffee.", "The user drinks coffee."),
        ("user: I barely slept last night.", "The user slept last night."),
        ("user: I rarely cook at home.", "The user cooks at home."),
        ("user: We seldom travel abroad.", "The user travels abroad."),
        ("user: I declined the offer from Google.", "The user accepted the offer from Google."),
        ("user: My sister refused to sign the contract.", "The user's sister signed the contract."),
        ("user: I failed to pass the driving test.", "The user passed the driving test."),
    ),
    "antonym": (
        ("user: I hate early meetings.", "The user loves early meetings."),
        ("user: The new laptop is slow.", "The new laptop is fast."),
        ("user: The build server is down again.", "The build server is up again."),
        ("user: I dislike jazz.", "The user likes jazz."),
        ("user: Prices went up last month.", "Prices went down last month."),
        ("user: I lost the chess tournament.", "The user won the chess tournament."),
        ("user: The flight arrived late.", "The flight arrived early."),
    ),
    "value from elsewhere in the line": (
        ("user: We moved the standup from Monday to Thursday.", "The standup is on Monday."),
        ("user: My wife runs 10 km every morning.", "The user runs 10 km every morning."),
        ("user: I bought the car in 2019 and sold it in 2023.", "The user bought the car in 2023."),
        ("user: We switched from MySQL to PostgreSQL last year.", "The team uses MySQL."),
        ("user: My brother lives in Porto and I live in Lisbon.", "The user lives in Porto."),
        ("user: The meeting was moved from 3pm to 5pm.", "The meeting is at 3pm."),
        ("user: My son is 12 and my daughter is 9.", "The user's son is 9."),
    ),
    "assistant's suggestion as the user's": (
        ("user: Which database should we use?\nassistant: You should use PostgreSQL.", "The user decided to use PostgreSQL."),
        ("user: Any ideas for the trip?\nassistant: I suggest visiting Kyoto in April.", "The user will visit Kyoto in April."),
        ("user: How do I fix the build?\nassistant: Try pinning numpy to 1.26.", "The user pinned numpy to 1.26."),
        ("user: What should I name the project?\nassistant: How about calling it Falcon?", "The user named the project Falcon."),
        ("user: Should I take the job?\nassistant: I would accept the offer from Acme.", "The user accepted the offer from Acme."),
        ("user: What about lunch?\nassistant: Let's book the Italian place on Friday.", "The user booked the Italian place on Friday."),
    ),
    "hedge, condition or question as certain": (
        ("user: Maybe I'll move to Berlin next year.", "The user will move to Berlin next year."),
        ("user: I might adopt a dog.", "The user adopted a dog."),
        ("user: If the budget allows, we will hire two engineers.", "The team will hire two engineers."),
        ("user: Should we migrate to Kubernetes?", "The team will migrate to Kubernetes."),
        ("user: I'm thinking about learning Rust.", "The user is learning Rust."),
        ("user: Is the deadline on Friday?", "The deadline is on Friday."),
        ("user: I'd probably pick the blue car.", "The user picked the blue car."),
    ),
    "qualifier dropped": (
        ("user: I worked at Google until 2020.", "The user works at Google."),
        ("user: My former boss, Dana, lives in Oslo.", "The user's boss Dana lives in Oslo."),
        ("user: I used to play the violin.", "The user plays the violin."),
        ("user: My ex-wife lives in Rome.", "The user's wife lives in Rome."),
        ("user: I was a vegetarian for ten years.", "The user is a vegetarian."),
        ("user: We previously used Jenkins for CI.", "The team uses Jenkins for CI."),
    ),
}  # fmt: skip

FAITHFUL: tuple[tuple[str, str], ...] = (
    ("user: I dont eat pork.", "The user doesn't eat pork."),
    ("user: I cant swim.", "The user cannot swim."),
    ("user: I don't miss London at all.", "The user does not miss London."),
    ("user: I don't mind working weekends.", "The user doesn't mind working weekends."),
    ("user: I can't wait to see Lisbon again.", "The user looks forward to seeing Lisbon again."),
    ("user: I'm not too keen on sushi.", "The user is not keen on sushi."),
    ("user: I rarely cook at home.", "The user seldom cooks at home."),
    ("user: I hardly ever drink coffee.", "The user rarely drinks coffee."),
    ("user: I declined the offer from Google.", "The user declined Google's offer."),
    ("user: I hate early meetings.", "The user hates early meetings."),
    ("user: I hate early meetings.", "The user dislikes early meetings."),
    ("user: The new laptop is slow.", "The user's new laptop is slow."),
    ("user: The build server is down again.", "The build server went down again."),
    ("user: We moved the standup from Monday to Thursday.", "The standup is now on Thursday."),
    ("user: My wife runs 10 km every morning.", "The user's wife runs 10 km every morning."),
    ("user: I bought the car in 2019 and sold it in 2023.", "The user sold the car in 2023."),
    ("user: We switched from MySQL to PostgreSQL last year.", "The team switched from MySQL to PostgreSQL."),
    ("user: I worked at Google until 2020.", "The user worked at Google until 2020."),
    ("user: I used to play the violin.", "The user used to play the violin."),
    ("user: Maybe I'll move to Berlin next year.", "The user may move to Berlin next year."),
    ("user: Which database should we use?\nassistant: You should use PostgreSQL.\nuser: Agreed, let's go with PostgreSQL.", "The user decided to use PostgreSQL."),
    ("user: I love hiking in the Alps.", "The user enjoys hiking in the Alps."),
    ("user: I moved to Lisbon in 2021.", "The user has lived in Lisbon since 2021."),
    ("user: My daughter Emma starts school in September.", "Emma, the user's daughter, starts school in September."),
    ("user: We will deploy the new API on Friday.", "The team plans to deploy the new API on Friday."),
    ("user: I never drink coffee after 6pm.", "The user does not drink coffee after 6pm."),
    ("user: I stopped eating meat last year.", "The user stopped eating meat."),
    ("user: The Oracle licence wont be renewed.", "The Oracle licence will not be renewed."),
)  # fmt: skip

# What a lexical check cannot see (docs/grounding.md, "Out of reach"): a tense alone ("was"
# for "is"), a paraphrase sharing no word with its line ("has lived there since" for "moved").
OUT_OF_REACH = frozenset(
    {
        ("user: I was a vegetarian for ten years.", "The user is a vegetarian."),
        ("user: I moved to Lisbon in 2021.", "The user has lived in Lisbon since 2021."),
    }
)
