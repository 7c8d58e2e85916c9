"""The answer on Envoy's `specroute.edit` stream: only for an answer with bytes the client must
not get (what the picker asked the engine for, to read its stats: the usage chunk of
`include_usage`, SGLang's `meta_info`), which the pick marks `answer: edited` and Envoy's route
then sends through this filter. Every other answer passes it by (the route disables it).

STREAMED: Envoy holds each chunk until it is answered, once, and the answer is "go on" (no
byte sent back) unless the client must get other bytes in its place: the answer's Server-Sent
Events split as the proxy splits them (an event cut between two chunks waits for its end),
minus what the picker asked for; a JSON answer whole at its end. The watcher accounts for the
answer; this stream only edits what the client gets, by the proxy's code (backends/client_view).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from backends.client_view import Added, client_events, observed_body
from backends.measure import StreamMeter
from backends.sse import SSESplitter, is_event_stream
from router.epp import messages

Responses = list[ext_proc.ProcessingResponse]


@dataclass
class Edit:
    """The state of one answer's edit stream."""

    added: Added | None = None  # None: not yet read from the first message
    sse: bool = False
    content_type: str = ""
    splitter: SSESplitter = field(default_factory=SSESplitter)
    meter: StreamMeter = field(default_factory=lambda: StreamMeter(started_at=0.0))  # unread
    answer: bytearray = field(default_factory=bytearray)  # a JSON answer, edited at its end
    ended: bool = False  # the answer's last message is answered

    def on(self, message: ext_proc.ProcessingRequest) -> Responses:
        if self.added is None:  # from the pick's metadata, forwarded
            strip = set(messages.ours(message).get("strip", "").split(","))
            self.added = Added(usage="usage" in strip, meta_info="meta_info" in strip)
        kind = message.WhichOneof("request")
        self.ended = self.ended or messages.ends_its_side(message)
        if kind == "response_headers":
            headers = messages.header_map(message.response_headers)
            self.content_type = headers.get("content-type", "")
            self.sse = is_event_stream(self.content_type)
            return [messages.response_headers({})]
        if kind == "response_body":
            return [self._chunk(message.response_body)]
        if kind == "response_trailers":  # all chunks answered: what was held has nowhere to go
            return [messages.trailers(request=False)]
        return []

    def _chunk(self, body: ext_proc.HttpBody) -> ext_proc.ProcessingResponse:
        assert self.added is not None
        chunk = body.body
        if not (self.added.usage or self.added.meta_info):  # nothing of the picker's in it
            return messages.RESPONSE_BODY_CONTINUE
        if self.sse:
            out = client_events(self.splitter, chunk, self.meter, self.added, 0.0)
            if body.end_of_stream:
                out += self.splitter.flush()
        else:
            if not self.added.meta_info:  # nothing of the picker's in a JSON answer
                return messages.RESPONSE_BODY_CONTINUE
            # what the client gets depends on the whole answer (`meta_info`): all at the end
            self.answer += chunk
            out = b""
            if body.end_of_stream:
                out = observed_body(bytes(self.answer), self.content_type, self.meter,
                                    self.added, 0.0)
        return messages.response_chunk(chunk, out)
