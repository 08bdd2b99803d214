"""Sluice through the official `openai` Python client (PyPI), as a user would call it.

Usage: client.py BASE_URL API_KEY QUESTION
Prints one JSON object: what the streamed and the whole answer carried, and which errors the
client raised for a bad key and a request without a user message.
"""

import json
import sys

import openai

base_url, api_key, question = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
out = {"openai_version": openai.__version__}

models = client.models.list()
out["models"] = [m.id for m in models.data]

messages = [
    {"role": "system", "content": "You are a helpful bank assistant."},
    {"role": "user", "content": question},
]
stream = client.chat.completions.create(model="sluice", messages=messages, stream=True)
deltas, finish, extension, ids = [], None, None, set()
for chunk in stream:
    ids.add(chunk.id)
    for choice in chunk.choices:
        if choice.delta.content:
            deltas.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
    extra = (chunk.model_extra or {}).get("sluice")
    if extra is not None:
        extension = extra
out["stream"] = {
    "deltas": len(deltas),
    "text": "".join(deltas),
    "finish_reason": finish,
    "ids": sorted(ids),
    "sluice": extension,
}

whole = client.chat.completions.create(
    model="sluice", messages=messages, extra_body={"sluice": {"cache": "bypass", "k": 3}}
)
out["whole"] = {
    "object": whole.object,
    "text": whole.choices[0].message.content,
    "role": whole.choices[0].message.role,
    "finish_reason": whole.choices[0].finish_reason,
    "sluice": (whole.model_extra or {}).get("sluice"),
}

errors = {}
try:
    openai.OpenAI(base_url=base_url, api_key="sk-sluice-wrong", max_retries=0).chat.completions.create(
        model="sluice", messages=messages
    )
except openai.AuthenticationError as e:
    errors["bad_key"] = {"status": e.status_code, "code": e.code, "type": e.type}
try:
    client.chat.completions.create(model="sluice", messages=[{"role": "system", "content": "hi"}])
except openai.BadRequestError as e:
    errors["no_user_message"] = {"status": e.status_code, "code": e.code, "type": e.type}
out["errors"] = errors
print(json.dumps(out))
