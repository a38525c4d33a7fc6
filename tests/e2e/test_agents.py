"""Agent frameworks on zest as applications use them, against the real server and SmolLM2:
openai-agents' default model (the Responses API, through the client set as its default) and
pydantic-ai's OpenAI models, each running a function tool and taking its result back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem
from agents.models import _openai_shared
from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import RunContext
from pydantic_ai.messages import TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.e2e.conftest import Server

QUESTION = "What is the weather in Oslo?"


class City(BaseModel):
    city: str


@pytest.fixture
def no_tracing() -> Iterator[None]:
    """openai-agents uploads traces to OpenAI by default: never from a test."""
    set_tracing_disabled(True)
    yield
    _openai_shared.set_default_openai_client(None)  # type: ignore[arg-type]  # as before


def client_of(server: Server) -> openai.AsyncOpenAI:
    # A run is several requests, each a prompt with the tools' descriptions: room for a
    # loaded 2-core machine.
    return openai.AsyncOpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=300)


def test_openai_agents_default_model_calls_a_tool_and_answers(
    server: Server, no_tracing: None
) -> None:
    """Runner.run with the SDK's default model: the Responses API, sent include: [] and the
    rest of its defaults; the tool's output goes back as a function_call_output item."""
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        asked.append(city)
        return f"It is sunny in {city}."

    async def run() -> Any:
        async with client_of(server) as client:
            set_default_openai_client(client, use_for_tracing=False)
            agent = Agent(
                name="weather",
                instructions="Use the tools to answer.",
                tools=[get_weather],
                model="chat",  # a zest task
                model_settings=ModelSettings(tool_choice="required", temperature=0),
            )
            return await Runner.run(agent, QUESTION, max_turns=4)

    result = asyncio.run(run())
    kinds = [type(item) for item in result.new_items]
    assert kinds[:2] == [ToolCallItem, ToolCallOutputItem]
    assert kinds[-1] is MessageOutputItem
    assert asked
    assert isinstance(result.final_output, str)
    assert result.final_output.strip()


def pydantic_agent(model: Any, asked: list[str], **settings: Any) -> PydanticAgent[None, str]:
    """An agent whose first step must call a tool (SmolLM2 seldom chooses to), then free."""

    def per_step(ctx: RunContext[None]) -> Any:
        return {**settings, "tool_choice": "required" if ctx.run_step <= 1 else "auto"}

    agent = PydanticAgent(
        model, instructions="Use the tools to answer briefly.", model_settings=per_step
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        asked.append(city)
        return f"It is sunny in {city}."

    return agent


def test_pydantic_ai_on_the_responses_api_with_its_openai_settings(server: Server) -> None:
    """Its Responses model with the settings an application may set: truncation, logprobs,
    service tier, the end user's id (all taken; the no-ops named in x-zest-ignored)."""
    asked: list[str] = []

    async def run() -> Any:
        async with client_of(server) as client:
            model = OpenAIResponsesModel("chat", provider=OpenAIProvider(openai_client=client))
            agent = pydantic_agent(
                model,
                asked,
                temperature=0,
                max_tokens=64,
                openai_truncation="auto",
                openai_logprobs=True,
                openai_top_logprobs=2,
                openai_service_tier="auto",
                openai_user="u-1",
            )
            return await agent.run(QUESTION)

    result = asyncio.run(run())
    assert asked
    kinds = [type(part) for message in result.all_messages() for part in message.parts]
    assert kinds == [UserPromptPart, ToolCallPart, ToolReturnPart, TextPart]
    assert result.output.strip()


def test_pydantic_ai_structured_output_on_chat_completions(server: Server) -> None:
    """Its chat model with an output type: the answer comes back through its output tool, a
    call that zest's grammar keeps to the type's schema."""
    asked: list[str] = []

    async def run() -> Any:
        async with client_of(server) as client:
            model = OpenAIChatModel("chat", provider=OpenAIProvider(openai_client=client))
            agent = pydantic_agent(model, asked, temperature=0, max_tokens=64)
            return await agent.run(QUESTION, output_type=City)

    result = asyncio.run(run())
    assert isinstance(result.output, City)
    assert result.output.city.strip()
