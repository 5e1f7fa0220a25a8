"""One fake upstream that speaks every provider family the gateway reaches: OpenAI's
chat, completions, embeddings and responses, Azure's deployment paths, and Anthropic's
messages, JSON and SSE; it records each request and fails where a test says."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass
class Seen:
    family: str
    path: str
    query: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FamilyUpstream:
    seen: list[Seen] = field(default_factory=list)
    #: family -> (status, body, headers) it answers with instead of its answer
    fail: dict[str, tuple[int, dict[str, Any], dict[str, str]]] = field(default_factory=dict)
    text: str = "Hello there"

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
            Route("/openai/deployments/{deployment}/{rest:path}", self.azure, methods=["POST"]),
            Route("/v1/{rest:path}", self.openai, methods=["POST"]),
        ])

    async def _note(self, family: str, request: Request) -> tuple[dict[str, Any],
                                                                  Response | None]:
        body = json.loads(await request.body())
        self.seen.append(Seen(family, request.url.path, request.url.query,
                              dict(request.headers), body))
        if family in self.fail:
            status, error, headers = self.fail[family]
            return body, JSONResponse(error, status, headers=headers)
        return body, None

    async def azure(self, request: Request) -> Response:
        body, failed = await self._note("azure", request)
        return failed or self._openai_answer(request.path_params["rest"], body)

    async def openai(self, request: Request) -> Response:
        body, failed = await self._note("openai", request)
        return failed or self._openai_answer(request.path_params["rest"], body)

    def _openai_answer(self, rest: str, body: dict[str, Any]) -> Response:
        model = body.get("model")
        if rest == "embeddings":
            return JSONResponse({"object": "list", "model": model, "data": [
                {"object": "embedding", "index": 0, "embedding": [0.25, -0.5]}],
                "usage": {"prompt_tokens": 3, "total_tokens": 3}})
        if rest == "completions":
            if body.get("stream"):
                return _sse([(None, {"id": "cmpl-1", "object": "text_completion",
                                     "choices": [{"index": 0, "text": self.text,
                                                  "finish_reason": None}]}),
                             (None, {"id": "cmpl-1", "object": "text_completion",
                                     "choices": [{"index": 0, "text": "",
                                                  "finish_reason": "stop"}]})], done=True)
            return JSONResponse({"id": "cmpl-1", "object": "text_completion", "model": model,
                                 "created": 1, "choices": [{"index": 0, "text": self.text,
                                                            "finish_reason": "stop",
                                                            "logprobs": None}],
                                 "usage": {"prompt_tokens": 2, "completion_tokens": 2,
                                           "total_tokens": 4}})
        if rest == "responses":
            done = {"id": "resp_1", "object": "response", "created_at": 1, "model": model,
                    "status": "completed", "output": [{
                        "type": "message", "id": "msg_1", "role": "assistant",
                        "status": "completed", "content": [{
                            "type": "output_text", "text": self.text, "annotations": []}]}],
                    "usage": {"input_tokens": 2, "output_tokens": 2, "total_tokens": 4}}
            if body.get("stream"):
                return _sse([
                    ("response.created", {"type": "response.created", "sequence_number": 0,
                                          "response": {**done, "status": "in_progress",
                                                       "output": []}}),
                    ("response.output_text.delta", {
                        "type": "response.output_text.delta", "sequence_number": 1,
                        "item_id": "msg_1", "output_index": 0, "content_index": 0,
                        "delta": self.text}),
                    ("response.completed", {"type": "response.completed",
                                            "sequence_number": 2, "response": done})])
            return JSONResponse(done)
        # chat completions
        if body.get("stream"):
            head = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1,
                    "model": model}
            chunks: list[tuple[str | None, dict[str, Any]]] = [
                (None, {**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                   "content": ""},
                                             "finish_reason": None}]})]
            for word in self.text.split(" "):
                chunks.append((None, {**head, "choices": [{"index": 0, "delta": {
                    "content": word + " "}, "finish_reason": None}]}))
            chunks.append((None, {**head, "choices": [{"index": 0, "delta": {},
                                                       "finish_reason": "stop"}]}))
            chunks.append((None, {**head, "choices": [], "usage": {
                "prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}))
            return _sse(chunks, done=True)
        return JSONResponse({"id": "chatcmpl-9", "object": "chat.completion", "created": 1,
                             "model": model, "choices": [{
                                 "index": 0, "finish_reason": "stop", "logprobs": None,
                                 "message": {"role": "assistant", "content": self.text}}],
                             "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                       "total_tokens": 7}})

    async def messages(self, request: Request) -> Response:
        body, failed = await self._note("anthropic", request)
        if failed:
            return failed
        model = body.get("model")
        if body.get("stream"):
            events: list[tuple[str | None, dict[str, Any]]] = [
                ("message_start", {"type": "message_start", "message": {
                    "id": "msg_01", "type": "message", "role": "assistant", "model": model,
                    "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": 12, "output_tokens": 1}}}),
                ("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}}),
                ("ping", {"type": "ping"})]
            for word in self.text.split(" "):
                events.append(("content_block_delta", {
                    "type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": word + " "}}))
            events += [
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta", "delta": {
                    "stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 6}}),
                ("message_stop", {"type": "message_stop"})]
            return _sse(events, headers={"request-id": "req_ant_1"})
        return JSONResponse({"id": "msg_01", "type": "message", "role": "assistant",
                             "model": model, "content": [{"type": "text", "text": self.text}],
                             "stop_reason": "end_turn", "stop_sequence": None,
                             "usage": {"input_tokens": 12, "output_tokens": 6}},
                            headers={"request-id": "req_ant_1"})

    async def count_tokens(self, request: Request) -> Response:
        _, failed = await self._note("anthropic", request)
        return failed or JSONResponse({"input_tokens": 14})


def _sse(events: list[tuple[str | None, dict[str, Any]]], *, done: bool = False,
         headers: dict[str, str] | None = None) -> Response:
    out = b""
    for name, data in events:
        if name:
            out += f"event: {name}\n".encode()
        out += b"data: " + json.dumps(data).encode() + b"\n\n"
    if done:
        out += b"data: [DONE]\n\n"
    return Response(out, 200, media_type="text/event-stream", headers=headers)
