"""A conversation through Sluice's chat route, with the official `openai` client and with
LangChain's `ChatOpenAI` (PyPI `langchain-openai`), as a chat front-end sends it: the whole
conversation every turn.

Usage: conversation.py BASE_URL API_KEY
Prints one JSON object: what each client saw (text, finish reason, sources, usage).
"""

import json
import sys

import openai
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

base_url, api_key = sys.argv[1], sys.argv[2]
SYSTEM = "You are the Harbor Bank assistant."
TURNS = [
    ("user", "I lost my card. What should I do?"),
    ("assistant", "Freeze the card in the app and order a replacement [1]."),
    ("user", "How soon will the new one arrive?"),
]
out = {}

client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)
messages = [{"role": "system", "content": SYSTEM}] + [{"role": r, "content": c} for r, c in TURNS]
stream = client.chat.completions.create(
    model="sluice",
    messages=messages,
    stream=True,
    stream_options={"include_usage": True},
    max_tokens=24,
    extra_body={"sluice": {"cache": "bypass"}},
)
text, finish, extension, usage = [], None, None, None
for chunk in stream:
    for choice in chunk.choices:
        if choice.delta.content:
            text.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
    extension = (chunk.model_extra or {}).get("sluice") or extension
    if chunk.usage is not None:
        usage = chunk.usage.model_dump()
out["openai_stream"] = {"text": "".join(text), "finish_reason": finish, "sluice": extension, "usage": usage}

whole = client.chat.completions.create(
    model="sluice", messages=messages, max_tokens=4, extra_body={"sluice": {"cache": "bypass"}}
)
out["openai_whole"] = {
    "text": whole.choices[0].message.content,
    "finish_reason": whole.choices[0].finish_reason,
    "usage": whole.usage.model_dump() if whole.usage else None,
}

chat = ChatOpenAI(
    model="sluice",
    base_url=base_url,
    api_key=api_key,
    max_retries=0,
    timeout=120,
    max_tokens=24,
    stream_usage=True,
    extra_body={"sluice": {"cache": "bypass"}},
)
history = [SystemMessage(SYSTEM)] + [
    HumanMessage(c) if r == "user" else AIMessage(c) for r, c in TURNS
]
reply = chat.invoke(history)
out["langchain_invoke"] = {
    "text": reply.content,
    "finish_reason": reply.response_metadata.get("finish_reason"),
    "usage": reply.usage_metadata,
}
streamed = None
for piece in chat.stream(history):
    streamed = piece if streamed is None else streamed + piece
out["langchain_stream"] = {
    "text": streamed.content,
    "usage": streamed.usage_metadata,
    "finish_reason": streamed.response_metadata.get("finish_reason"),
}
print(json.dumps(out))
