"""`zest chat` through a pseudo-terminal, as a person types into it, and `zest run` one shot,
against the real server: streamed answers, history kept until /reset, /task, Ctrl-C stopping
the answer and not the session, Ctrl-D leaving. The conversation's transcript is the sample
the docs show (docs/snippets/zest-chat.txt), written anew by each run."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
from collections.abc import Iterator

import pexpect
import pytest

from tests.e2e.conftest import REPO, ZEST, Server, run_zest, start_server, stop_server
from tests.upstream import Behaviour, Proxy
from zest.gateway.cli._chat import Session
from zest.gateway.cli._client import Gateway

ENV = {**os.environ, "ZEST_API_KEY": "", "TERM": "dumb"}
TRANSCRIPT = REPO / "docs" / "snippets" / "zest-chat.txt"
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def chat(server: Server, *args: str) -> pexpect.spawn:
    child = pexpect.spawn(
        str(ZEST), ["chat", *args, "--url", server.base_url], env=ENV, encoding="utf-8", timeout=300
    )
    child.logfile_read = io.StringIO()  # what the terminal showed, typed lines echoed
    child.expect_exact("/quit (or Ctrl-D) leaves")
    return child


def test_a_conversation_keeps_its_history_until_reset(server: Server) -> None:
    options = ("--max-tokens", "24", "--temperature", "0")
    child = chat(server, *options)
    child.expect_exact("chat> ")
    child.sendline("My name is Ada. Say hello to me.")
    child.expect(r"\[smollm2 on [^;]+; (\d+) in, (\d+) out")
    first_prompt = int(child.match.group(1))
    child.expect_exact("chat> ")
    child.sendline("What is my name?")
    child.expect(r"\[smollm2 on [^;]+; (\d+) in, ")
    assert int(child.match.group(1)) > first_prompt + 10  # the first turn went along
    child.expect_exact("chat> ")
    child.sendline("/reset")
    child.expect_exact("(history cleared)")
    child.sendline("Hi")
    child.expect(r"\[smollm2 on [^;]+; (\d+) in, ")
    assert int(child.match.group(1)) < first_prompt
    child.expect_exact("chat> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    save_transcript(child, server, " ".join(("zest chat", *options)))


def save_transcript(child: pexpect.spawn, server: Server, command: str) -> None:
    """The session as a person saw it, for the docs: the test server's port shown as the
    default one, and the screen's carriage returns and escapes left out."""
    assert isinstance(child.logfile_read, io.StringIO)
    shown = ESCAPES.sub("", child.logfile_read.getvalue()).replace("\r\n", "\n").replace("\r", "")
    shown = shown.replace(server.base_url, "http://127.0.0.1:8000")
    TRANSCRIPT.write_text(f"$ {command}\n{shown.rstrip()}\n", encoding="utf-8")


@pytest.fixture(scope="module")
def endless() -> Iterator[Proxy]:
    """An upstream whose answer never ends until its client leaves (then `left` is set)."""
    running = Proxy("http://127.0.0.1:9/v1", Behaviour(endless="and then "))
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory, endless: Proxy) -> Iterator[Server]:
    """A server whose chat task is that upstream: an answer Ctrl-C always finds running, however
    slow the machine (the 400-token answer of the bundled model could end before it)."""
    folder = tmp_path_factory.mktemp("held")
    routes = folder / "routes.yaml"
    routes.write_text(
        "version: 1\n"
        "models:\n"
        f"  teller: {{engine: remote, base_url: '{endless.v1}', model: teller}}\n"
        "routes:\n"
        "  chat: {kind: chat, model: teller, privacy: allow_remote, max_tokens: 100000}\n"
    )
    running = start_server(routes, folder / "zest.log", {"ZEST_EMULATE_DEVICES": ""})
    yield running
    stop_server(running)


def test_ctrl_c_stops_the_answer_not_the_session(held: Server, endless: Proxy) -> None:
    endless.reset()
    endless.behaviour = Behaviour(endless="and then ")
    child = chat(held)
    child.expect_exact("chat> ")
    child.sendline("Write a long story about a dragon and a knight.")
    child.expect_exact("knight.\r\n")  # the line typed, echoed
    child.expect_exact("and then and then and then")  # the answer has begun, and never ends
    child.sendintr()
    child.expect_exact("(stopped; kept in the history, marked as cut)")
    # The stop reached the upstream: zest closed its stream (a hang guard, not a speed bound).
    assert endless.left.wait(timeout=300), f"the stream went on; the terminal: {shown(child)}"
    child.expect_exact("chat> ")
    child.sendline("/history")  # the cut turn stays, marked, with the part written
    child.expect(r"you: Write a long story about a dragon and a knight\.\r\nchat: (.+) \[cut\]")
    assert child.match.group(1).startswith("and then and then")
    child.expect_exact("chat> ")
    child.sendintr()  # at the prompt: it says how to leave instead
    child.expect_exact("(Ctrl-D or /quit leaves)")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


class _LosesCtrlC:
    """Ctrl-C whose KeyboardInterrupt Python drops: the handler runs inside this finalizer, where
    an exception is printed as "Exception ignored" and goes no further."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100_000):  # the handler runs at a safe point of this loop
            pass


# Python reports the dropped KeyboardInterrupt as unraisable: here that is the point.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_ctrl_c_whose_interrupt_python_drops_still_stops_the_answer(
    held: Server, endless: Proxy
) -> None:
    """The handler shuts the stream's socket itself: the read ends as a stop, and the gateway
    sees the client leave (without it the answer went on being read, the gateway generating)."""
    endless.reset()
    endless.behaviour = Behaviour(endless="and then ")
    gateway = Gateway(held.base_url, None)
    with gateway.client(timeout=None) as client:
        session = Session(client, gateway, "chat", "chat")
        with pytest.raises(KeyboardInterrupt):
            read_losing_ctrl_c(session)
    assert session.ctrl_c.stopped
    assert session.cut()  # the part written is the turn's
    assert endless.left.wait(timeout=300)


def read_losing_ctrl_c(session: Session) -> None:
    with session.ctrl_c.installed():
        for pieces, _ in enumerate(session.answer("Write a long story."), start=1):
            if pieces == 3:
                _LosesCtrlC()  # no reference kept: finalized at once
            assert pieces < 200, "the answer went on after Ctrl-C"


def shown(child: pexpect.spawn) -> str:
    assert isinstance(child.logfile_read, io.StringIO)
    return child.logfile_read.getvalue()[-2000:]


def test_task_switches_to_another_kind_and_names_an_unknown_one(server: Server) -> None:
    child = chat(server)
    child.expect_exact("chat> ")
    child.sendline("/task autocomplete")
    child.expect_exact("(task autocomplete, completion; history cleared)")
    child.expect_exact("autocomplete> ")
    child.sendline("def add(a, b):")
    child.expect(r"\[smollm2 on ")
    child.sendline("/task nosuch")
    child.expect_exact("error: unknown task 'nosuch': use one of ")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_a_rate_is_not_made_up_from_a_one_or_two_token_answer(server: Server) -> None:
    """A two-token answer's decode rate times one step and its overhead ("1 tokens/s")."""
    child = chat(server, "--max-tokens", "2", "--temperature", "0")
    child.expect_exact("chat> ")
    child.sendline("Say yes.")
    child.expect(r"\[smollm2 on [^;]+; \d+ in, [12] out; (\S+) tokens/s\]")
    assert child.match.group(1) == "—"
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()


def test_run_answers_once_from_arguments_or_stdin(server: Server) -> None:
    url = ["--url", f"{server.base_url}/v1"]  # the /v1 form is the same server
    argued = run_zest("run", "chat", "Name", "a", "colour.", "--max-tokens", "8", *url, env=ENV)
    assert argued.returncode == 0, argued.stderr
    assert argued.stdout.strip()
    assert argued.stderr.startswith("[smollm2 on ")
    piped = subprocess.run(
        [str(ZEST), "run", "summarization", *url, "--max-tokens", "16"],
        input="The meeting moved from Monday to Friday because the room was booked.",
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,  # a hang guard, not a speed bound
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.strip()


def test_run_finds_the_server_by_its_port_without_a_url(server: Server) -> None:
    """`ZEST_PORT=9000 make serve` and a `zest run` in the same shell meet."""
    port = server.base_url.rsplit(":", 1)[1]
    env = {k: v for k, v in ENV.items() if k not in ("ZEST_URL", "ZEST_HOST")}
    answered = run_zest("run", "chat", "Hi", "--max-tokens", "4", env={**env, "ZEST_PORT": port})
    assert answered.returncode == 0, answered.stderr
    assert answered.stderr.startswith("[smollm2 on ")


def test_run_names_what_is_wrong(server: Server) -> None:
    unknown = run_zest("run", "nosuch", "hi", "--url", server.base_url, env=ENV)
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("zest: unknown task 'nosuch': use one of ")
    down = run_zest("run", "chat", "hi", "--url", "http://127.0.0.1:9", env=ENV)
    assert down.returncode == 1
    assert "cannot reach the gateway at http://127.0.0.1:9" in down.stderr
    assert "start it with `zest serve`" in down.stderr
