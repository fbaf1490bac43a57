"""A fake LLM upstream for the response-cost tests: an OpenAI-compatible
chat completions endpoint that reports the tokens a request used in its
response's `usage`, as a JSON body or as the last event of a
`text/event-stream` body.

Each request says what it gets, in headers:
- `x-prompt-tokens`, `x-completion-tokens`: the usage reported (default 10 and 20);
- `x-stream: 1`: an event stream (`x-chunks` content events, default 3, each
  `x-chunk-ms` apart, default 0), then the usage event, then `[DONE]`;
- `x-abort-after: K`: the stream is cut (the connection closed) after K events;
- `x-no-usage: 1`: no usage anywhere;
- `x-usage: JSON`: this usage object instead (as a priced API reports it:
  `{"input_tokens": 10, "output_tokens": 5, ...}`);
- `x-delay-ms: N`: the answer starts N ms after the request came.
A JSON answer also reports the total in its `x-usage-total` header.
The upstream sums the usage it reported per `x-user` (`reported[user]`), only
for responses it sent whole, and counts the requests of each `x-user` it is
answering at once (`max_in_flight[user]`, the most seen).
"""

import http.server
import json
import threading
import time

from .upstream import HttpUpstream


class LlmUpstream(HttpUpstream):
    name = "llm"

    def __init__(self):
        outer = self
        self.reported: dict[str, int] = {}
        self.requests = 0
        self.in_flight: dict[str, int] = {}
        self.max_in_flight: dict[str, int] = {}
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("content-length", "0") or 0)
                if length:
                    self.rfile.read(length)
                outer._answer(self)

            do_GET = do_POST  # noqa: N815

            def log_message(self, *args):
                pass

        self._serve(Handler)

    def _answer(self, h):
        user = h.headers.get("x-user", "")
        with self._lock:
            self.requests += 1
            self.in_flight[user] = self.in_flight.get(user, 0) + 1
            self.max_in_flight[user] = max(self.max_in_flight.get(user, 0), self.in_flight[user])
        gone = []

        def leave():
            # Before the response's last bytes: once they are out, Envoy may
            # end the stream and admit the next request before this thread
            # runs again.
            with self._lock:
                if not gone:
                    gone.append(True)
                    self.in_flight[user] -= 1

        try:
            time.sleep(int(h.headers.get("x-delay-ms", "0")) / 1000)
            self._respond(h, user, leave)
        finally:
            leave()

    def _respond(self, h, user: str, leave):
        prompt = int(h.headers.get("x-prompt-tokens", "10"))
        completion = int(h.headers.get("x-completion-tokens", "20"))
        usage = None if h.headers.get("x-no-usage") else {
            "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        if h.headers.get("x-usage"):
            usage = json.loads(h.headers["x-usage"])
        if h.headers.get("x-stream") == "1":
            whole = self._stream(h, usage, leave)
        else:
            body = json.dumps({"id": "chatcmpl-1", "object": "chat.completion",
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                               "usage": usage}).encode()
            h.send_response(200)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(body)))
            if usage and "total_tokens" in usage:
                h.send_header("x-usage-total", str(usage["total_tokens"]))
            h.end_headers()
            leave()
            h.wfile.write(body)
            whole = True
        if whole and usage:
            with self._lock:
                self.reported[user] = self.reported.get(user, 0) + usage.get("total_tokens", 0)

    def _stream(self, h, usage, leave) -> bool:
        chunks = int(h.headers.get("x-chunks", "3"))
        pause = int(h.headers.get("x-chunk-ms", "0")) / 1000
        abort_after = int(h.headers.get("x-abort-after", "-1"))
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        events = [{"id": "c", "choices": [{"delta": {"content": f"w{i}"}}], "usage": None} for i in range(chunks)]
        events.append({"id": "c", "choices": [], "usage": usage})
        for i, event in enumerate(events):
            if i == abort_after:
                leave()
                h.wfile.flush()
                h.close_connection = True
                h.connection.shutdown(2)
                return False
            data = f"data: {json.dumps(event)}\n\n".encode()
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()
            if pause:
                time.sleep(pause)
        done = b"data: [DONE]\n\n"
        leave()
        h.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
        h.wfile.flush()
        return True
