"""The assistant's side of the agent-traffic set: long, generic markdown answers.

What a chat assistant writes back: a heading, an opening line, numbered steps each under its
own heading with bullets of general advice, a comparison table, a code block and a closing
list. The advice is the same whatever the user said, but names a few of the user's words
(`topics`), as a real answer does, so that searching the raw turns meets it. Two answers carry
something worth remembering: a recommendation the user then accepts, and a result of work the
assistant did.
"""

from __future__ import annotations

import random
import re

__all__ = ["generic", "kinds", "recommending", "reporting"]

STEPS = (4, 8)  # steps an answer has, at least and at most
BULLETS = (3, 7)  # bullets under each step
_ITEM = re.compile(r"^(?:[-*] |\d+\. )")  # a list item, bulleted or numbered
_TITLES = (
    "## A practical plan for your {t}",
    "## How to approach {t}",
    "## Making {t} work for you",
    "## Thinking through {t}",
)
_OPENINGS = (
    "Great question! Here is a structured way to think about {t} and {s}.",
    "That sounds like a lot to juggle. Let's break {t} down into manageable pieces.",
    "Thanks for sharing all of that. Below is a step-by-step guide covering {t} and {s}.",
    "Happy to help with {t}. Here is an overview, then concrete steps.",
)
_STEPS = (
    "### Step {n}: Clarify what you want from {t}",
    "### Step {n}: Break {t} into small tasks",
    "### Step {n}: Set up a simple routine",
    "### Step {n}: Track progress on {t}",
    "### Step {n}: Ask for support",
    "### Step {n}: Review and adjust",
    "### Step {n}: Protect your energy",
    "### Step {n}: Celebrate small wins",
)
_BULLETS = (
    "- Write down what you want from {t} before you start.",
    "- Keep a short log of {t} so you can see progress over time.",
    "- Set a realistic weekly target and review it every Sunday.",
    "- **Be specific:** vague goals are hard to act on.",
    "- Block time in your calendar, as you would for a meeting.",
    "- Share your plans for {t} with someone you trust.",
    "- Start with the smallest step that still moves you forward.",
    "- Expect setbacks; they are part of any process.",
    "- Use reminders on your phone so nothing slips.",
    "- Notice what drains you and what gives you energy.",
    "- Reflect on what worked last month and repeat it.",
    "- Keep {t} and {s} separate so one does not crowd out the other.",
    "- Consider a buddy system to stay accountable.",
    "- Limit yourself to three priorities per week.",
    "- Take breaks: rest is part of doing {t} well.",
    "- Look for local groups or online communities about {t}.",
    "- Prepare what you need the evening before.",
    "- Write a one-line summary at the end of each day.",
    "- If something feels overwhelming, cut it in half.",
    "- Be kind to yourself when plans change.",
)
_TABLE = (
    "| Option | Effort | Cost | Best for |",
    "|---|---|---|---|",
    "| Start with {t} | Low | Free | Getting going quickly |",
    "| Combine {t} and {s} | Medium | Low | Building a habit |",
    "| Work with a coach | High | Medium | Staying accountable |",
    "| Join a group | Medium | Low | Meeting people who care about {s} |",
)
_CODE = (
    "```python",
    "from dataclasses import dataclass",
    "",
    "@dataclass",
    "class Entry:",
    "    day: str",
    "    minutes: int",
    '    note: str = ""',
    "",
    "def weekly_total(entries: list[Entry]) -> int:",
    '    """Minutes spent on {t} this week."""',
    "    return sum(e.minutes for e in entries)",
    "```",
)
_CLOSINGS = (
    "### Key takeaways",
    "- Small, consistent steps beat big, rare efforts.",
    "- Review your plan for {t} regularly.",
    "- Adjust as your circumstances change.",
    "",
    "Would you like me to turn this into a checklist or a weekly schedule?",
)


def _filled(lines: tuple[str, ...] | list[str], t: str, s: str) -> list[str]:
    return [line.format(t=t, s=s) for line in lines]


def generic(topics: list[str], rng: random.Random) -> list[str]:
    """A long markdown answer of general advice naming the user's `topics`."""
    t, s = (topics * 2)[:2]
    lines = [rng.choice(_TITLES).format(t=t), "", rng.choice(_OPENINGS).format(t=t, s=s), ""]
    steps = rng.sample(_STEPS, rng.randint(*STEPS))
    for n, step in enumerate(steps, start=1):
        lines += [step.format(n=n, t=rng.choice(topics)), ""]
        lines += _filled(rng.sample(_BULLETS, rng.randint(*BULLETS)), rng.choice(topics), s)
        lines.append("")
    if rng.random() < 0.6:
        lines += ["### Comparing your options", "", *_filled(_TABLE, t, s), ""]
    if rng.random() < 0.5:
        lines += ["### A small script to keep track", "", *_filled(_CODE, t, s), ""]
    return lines + _filled(_CLOSINGS, t, s)


def recommending(choice: str, purpose: str, rng: random.Random) -> list[str]:
    """A generic answer about `purpose` that recommends `choice` (which the user accepts)."""
    words = purpose.split()
    lines = generic([words[-1], words[0] if len(words) > 1 else "setup"], rng)
    at = 4  # after the title and the opening line
    said = f"**Recommendation:** use {choice} for {purpose}; it is the simplest to keep up."
    return [*lines[:at], said, "", *lines[at:]]


def reporting(thing: str, took: str, rng: random.Random) -> list[str]:
    """A generic answer that reports a result: the assistant ran `thing`, which took `took`."""
    lines = generic([thing.split()[-1], thing.split()[0]], rng)
    said = f"**Result:** the {thing} finished in {took} with no errors."
    return [lines[0], "", said, "", *lines[2:]]


def kinds(lines: list[str]) -> dict[str, str]:
    """Each non-empty line of an answer and what it is: heading, code, table, bullet or prose."""
    out: dict[str, str] = {}
    fenced = False
    for line in lines:
        text = line.strip()
        if text.startswith("```"):
            fenced = not fenced
            out[text] = "code"
            continue
        if not text:
            continue
        if fenced:
            kind = "code"
        elif text.startswith("#"):
            kind = "heading"
        elif text.startswith("|"):
            kind = "table"
        elif _ITEM.match(text):
            kind = "bullet"
        else:
            kind = "prose"
        out.setdefault(text, kind)
    return out
