"""The official `openai` client (PyPI) through an edge that signs for a Lambda function URL
(CloudFront with origin access control): the Sluice key in x-api-key (the access control
signs in Authorization) and each body's SHA-256 in x-amz-content-sha256, set by an httpx
request hook — the two lines the deployment guide shows.

Usage: edge.py BASE_URL API_KEY QUESTION
Prints one JSON object: the streamed answer's text and sources, and what the same client
without the hook was told.
"""

import hashlib
import json
import sys

import httpx
import openai

base_url, api_key, question = sys.argv[1], sys.argv[2], sys.argv[3]


def content_sha256(request):
    request.headers["x-amz-content-sha256"] = hashlib.sha256(request.content).hexdigest()


client = openai.OpenAI(
    base_url=base_url,
    api_key=api_key,
    default_headers={"x-api-key": api_key},
    http_client=httpx.Client(event_hooks={"request": [content_sha256]}),
    max_retries=0,
    timeout=60,
)
messages = [{"role": "user", "content": question}]
text, sources = [], None
for chunk in client.chat.completions.create(model="sluice", messages=messages, stream=True):
    for choice in chunk.choices:
        if choice.delta.content:
            text.append(choice.delta.content)
    extra = (chunk.model_extra or {}).get("sluice")
    if extra is not None:
        sources = [s["id"] for s in extra.get("sources", [])]
out = {"text": "".join(text), "sources": sources}

plain = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
try:
    plain.chat.completions.create(model="sluice", messages=messages)
    out["without_hook"] = "answered"
except openai.APIStatusError as e:
    out["without_hook"] = e.status_code
print(json.dumps(out))
