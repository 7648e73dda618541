"""The README's examples, and those of the pages the README sends a reader to, run verbatim
against a daemon started with `make run`, as a newcomer would.

Each example is a fenced block preceded by `<!-- readme-test: NAME -->`; blocks that cannot run
here (root installs, Ollama, systemd) say why with `<!-- readme-skip: REASON -->`. In a shell
block, every `# ...` line shows output the commands must print.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from mcp import ClientSession, StdioServerParameters, stdio_client

from forged.config import DEFAULT_CONFIG_PATH
from tests.support.daemons import SYSTEMD_VARIABLES, NotifySocket, socket_client, wait_for_watermark
from tests.support.fakellm import FakeLLM

REPO = Path(__file__).resolve().parents[1]
# The README and the topic pages its detail moved to: one tour runs the blocks of all of them.
PAGES = (
    "README.md",
    *(
        f"docs/{p}.md"
        for p in ("api", "recall", "grounding", "operations", "postgresql", "development")
    ),
)
TEXTS = {page: (REPO / page).read_text() for page in PAGES}
BLOCK = re.compile(
    r"^<!-- readme-(?P<mark>test|skip): (?P<name>.*?) -->\n```(?P<lang>\w+)\n(?P<body>.*?)\n```$",
    re.M | re.S,
)
EXAMPLE = re.compile(r"^```(sh|python|json)$", re.M)
CHECKOUT_FILES = (
    "Makefile",
    "pyproject.toml",
    "config/forged.dev.toml",
    "tests/fixtures/chatgpt-conversations.json",
)
PLACEHOLDER = "/path/to/forged"  # the checkout, in the MCP host snippet
TIMEOUT = 180.0  # the whole tour, on a busy two-core machine
STOP_TIMEOUT = 15.0  # Ctrl-C must end `make run` well within this
MODEL = """
def call_model(system: str, user: str) -> str:
    print(f"model saw {system!r} for {user!r}")
    return "PostgreSQL, because we need JSONB."
"""  # the agent loop's "your model": says what memory it was given


def _blocks() -> dict[str, tuple[str, str]]:
    return {
        m["name"]: (m["lang"], m["body"])
        for text in TEXTS.values()
        for m in BLOCK.finditer(text)
        if m["mark"] == "test"
    }


@pytest.mark.parametrize("page", PAGES)
def test_every_example_is_run_or_says_why_not(page: str) -> None:
    """Each sh, python and json block is marked: run by this test, or skipped with a reason."""
    text = TEXTS[page]
    marked = [m for m in BLOCK.finditer(text) if m["lang"] in ("sh", "python", "json")]
    assert len(marked) == len(EXAMPLE.findall(text))
    assert all(m["name"].strip() for m in marked)


def test_no_two_examples_share_a_name() -> None:
    tested = [m["name"] for t in TEXTS.values() for m in BLOCK.finditer(t) if m["mark"] == "test"]
    assert len(set(tested)) == len(tested), "two examples share a name"


def _expected_output(body: str) -> list[str]:
    return [line[2:] for line in body.splitlines() if line.startswith("# ")]


@pytest.fixture
def checkout(sock_dir: Path) -> Path:
    """What a fresh clone holds that the examples use, and the environment `make run` made.

    The tour runs once, not once per store: `make run` serves the dev config's SQLite file."""
    for name in CHECKOUT_FILES:
        (sock_dir / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, sock_dir / name)
    (sock_dir / ".venv").mkdir()
    (sock_dir / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    (sock_dir / ".venv" / ".installed").touch()  # newer than pyproject.toml: nothing to install
    return sock_dir


def _environment(**extra: str) -> dict[str, str]:
    """A newcomer's shell: no FORGED_* or service-manager variables of ours leak in."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FORGED_") and k not in SYSTEMD_VARIABLES
    }
    return {**keep, **extra}


class Tour:
    """The checkout where `make run` serves, and the README's blocks run in it."""

    def __init__(self, checkout: Path, llm: FakeLLM) -> None:
        self.checkout = checkout
        self.llm = llm
        self.socket = str(checkout / "var" / "run" / "forged.sock")
        self.blocks = _blocks()
        self.log = checkout / "make-run.log"
        self.make: trio.Process | None = None

    async def make_run(self, notify: NotifySocket) -> None:
        _, body = self.blocks["make-run"]
        env = _environment(FORGED_DISTILLER_URL=self.llm.base_url, NOTIFY_SOCKET=str(notify.path))
        command = body.split("#")[0].split()
        with open(self.log, "wb") as log:  # noqa: ASYNC230 (local, once)
            self.make = await trio.lowlevel.open_process(
                command,
                cwd=self.checkout,
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,  # its own group, as a terminal's foreground job
                preexec_fn=_interruptible,
            )
        await notify.wait_for("READY=1")

    async def sh(self, name: str) -> str:
        """Run a shell block; return what it printed, after checking its `# ...` lines."""
        lang, body = self.blocks[name]
        assert lang == "sh"
        done = await trio.run_process(
            ["bash", "-e", "-c", body],
            cwd=self.checkout,
            env=_environment(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        output = done.stdout.decode() + done.stderr.decode()
        assert done.returncode == 0, f"{name}: {output}"
        for line in _expected_output(body):
            assert line in output, f"{name}: {line!r} not in {output!r}"
        return output

    async def distilled(self) -> None:
        """Wait until the daemon has distilled everything pushed so far."""
        async with socket_client(self.socket) as client:
            last = (await client.get("/v1/status")).json()["log"]["last_seq"]
            await wait_for_watermark(client, last)

    async def python(self, name: str) -> str:
        lang, body = self.blocks[name]
        assert lang == "python"
        done = await trio.run_process(
            [sys.executable, "-c", MODEL + body],
            cwd=self.checkout,
            env=_environment(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    async def mcp_host(self, name: str) -> tuple[str, str]:
        """Start the server as an MCP host would from the snippet; remember, then recall."""
        _, body = self.blocks[name]
        server = json.loads(body.replace(PLACEHOLDER, str(self.checkout)))["mcpServers"]["forged"]
        params = StdioServerParameters(
            command=server["command"], args=server["args"], env=server["env"]
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            stored = await session.call_tool(
                "remember", {"note": "Alice's team reviews database migrations on Mondays."}
            )
            recalled = await session.call_tool("recall", {"query": "which database"})
        return _text(stored), _text(recalled)

    async def ctrl_c(self) -> int:
        """Ctrl-C in the terminal: SIGINT to the foreground job, make and forged alike."""
        assert self.make is not None
        os.killpg(self.make.pid, signal.SIGINT)
        with trio.fail_after(STOP_TIMEOUT):
            return await self.make.wait()


def _interruptible() -> None:
    """Ctrl-C interrupts make, as in a terminal, even when this run inherited SIGINT ignored
    (a background job of a non-interactive shell does)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _text(result: object) -> str:
    return "\n".join(getattr(c, "text", "") for c in getattr(result, "content", []))


@pytest.fixture
async def tour(checkout: Path, fake_llm: FakeLLM) -> AsyncIterator[Tour]:
    tour = Tour(checkout, fake_llm)
    try:
        yield tour
    finally:
        if tour.make is not None and tour.make.returncode is None:
            os.killpg(tour.make.pid, signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await tour.make.wait()


@pytest.mark.skipif(DEFAULT_CONFIG_PATH.exists(), reason="a system configuration would be used")
@pytest.mark.skipif(not shutil.which("curl"), reason="the README's examples use curl")
async def test_the_readme_tour(tour: Tour, fake_llm: FakeLLM) -> None:
    """make run; push, status, search and context; the API, CLI, import, Python and MCP examples."""
    notify = NotifySocket(tour.checkout / "ready.sock")
    await notify.bind()
    with trio.fail_after(TIMEOUT):
        await tour.make_run(notify)
        notify.close()
        first = await tour.sh("quickstart")
        assert "forged 0.1.0, ready" in first and "distill: " in first
        await tour.distilled()
        recalled = await tour.sh("quickstart-recall")
        assert recalled.count("PostgreSQL as our database") >= 2  # search, then context
        await tour.sh("push")
        await tour.distilled()
        assert "PostgreSQL as our database" in await tour.sh("recall")
        assert '"observers":[{"name":"distill"' in await tour.sh("status")
        cli = await tour.sh("cli")
        assert "PostgreSQL as our database" in cli and "no open dead letters" in cli
        assert (tour.checkout / "alice.jsonl").read_text().count('"type":"fact"') >= 3
        await tour.sh("import")
        await tour.distilled()
        seen = await tour.python("agent-loop")
        assert "model saw '<memory>" in seen and "PostgreSQL" in seen.splitlines()[0]
        stored, mcp_recalled = await tour.mcp_host("mcp-config")
        assert stored == "Stored." and "PostgreSQL" in mcp_recalled
        await tour.sh("forget")
        async with socket_client(tour.socket) as client:
            searched = await client.get(
                "/v1/search", params={"q": "database", "scope": "user:alice"}
            )
        assert searched.json() == {"results": []}
        status = await tour.ctrl_c()
    assert status != 0  # make reports the interrupt; forged itself stopped cleanly:
    events = [
        json.loads(line).get("event")
        for line in tour.log.read_text().splitlines()
        if line.startswith("{")
    ]
    assert events[-1] == "stopped"
    assert not await trio.Path(tour.socket).exists()
