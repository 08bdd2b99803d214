"""The official MCP Python SDK (`mcp` on PyPI) against Sluice's /mcp over Streamable HTTP:
lists the tools, calls each, and calls what should fail; prints one JSON summary.

    mcp_client.py URL [KEY] QUESTION
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url, key, question = sys.argv[1], sys.argv[2], sys.argv[3]
    headers = {"authorization": f"Bearer {key}"} if key else {}
    seen: dict = {}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                info = await session.initialize()
                seen["server"] = info.server_info.name
                tools = await session.list_tools()
                seen["tools"] = [t.name for t in tools.tools]
                seen["schemas"] = {t.name: t.input_schema for t in tools.tools}
                progress = []

                async def told(done, total, message):
                    progress.append({"progress": done, "total": total, "message": message})

                for name, arguments in [
                    ("search", {"query": question, "k": 3}),
                    ("answer", {"query": question}),
                    ("list_documents", {"limit": 2}),
                ]:
                    result = await session.call_tool(name, arguments, progress_callback=told)
                    seen[name] = {"error": result.is_error, "content": result.structured_content}
                seen["progress"] = progress
                first = seen["list_documents"]["content"]["documents"][0]["id"]
                got = await session.call_tool("get_document", {"id": first})
                seen["get_document"] = {"error": got.is_error, "id": got.structured_content["id"]}
                failures = {}
                for name, arguments in [
                    ("search", {"k": 3}),
                    ("no_such_tool", {}),
                    ("get_document", {"id": "nobody-has-this"}),
                ]:
                    try:
                        result = await session.call_tool(name, arguments)
                        failures[name] = {"returned": result.model_dump(mode="json")}
                    except Exception as e:  # the SDK raises a JSON-RPC error as MCPError
                        error = getattr(e, "error", None)
                        failures[name] = {
                            "code": getattr(error, "code", None),
                            "data": getattr(error, "data", None),
                            "message": str(e),
                        }
                seen["failures"] = failures
    print(json.dumps(seen))


asyncio.run(main())
