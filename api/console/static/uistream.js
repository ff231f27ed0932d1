// The AI SDK's UI message stream as the chat page reads it: `data: <json>` events ending with
// `data: [DONE]` (docs/chat.md), folded into one assistant message of parts, as `useChat` does.

// Every chunk of the response in order, to `onChunk`; resolves when the stream ends.
export async function readChunks(response, onChunk) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame.split("\n").filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, "")).join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      let chunk;
      try {
        chunk = JSON.parse(data);
      } catch {
        continue; // not a chunk of the protocol's: skipped, as the SDK's parser would fail it
      }
      onChunk(chunk);
    }
  }
}

export function assistant(id, metadata = {}) {
  return { id, role: "assistant", parts: [], metadata };
}

// The open part of `type` with `id` (text and reasoning stream under their own ids).
function streamed(message, type, id) {
  let part = message.parts.findLast((p) => p.type === type && p.id === id);
  if (!part) {
    part = { type, id, text: "", state: "streaming" };
    message.parts.push(part);
  }
  return part;
}

// A call's part. Each model request numbers its calls afresh (call_0 in every step), so the
// latest part of that id is the call meant.
function tool(message, chunk, fresh = false) {
  let part = message.parts.findLast((p) => p.type === "tool" && p.toolCallId === chunk.toolCallId);
  if (!part || (fresh && part.state !== "input-streaming")) {
    part = { type: "tool", toolCallId: chunk.toolCallId, toolName: chunk.toolName, state: "input-streaming" };
    message.parts.push(part);
  }
  return part;
}

const TOOL_CHUNKS = {
  "tool-input-start": () => ({}),
  "tool-input-available": (chunk) => ({ state: "input-available", input: chunk.input }),
  "tool-input-error": (chunk) => ({ state: "output-error", input: chunk.input, errorText: chunk.errorText }),
  "tool-approval-request": (chunk) => ({ state: "approval-requested", approval: { id: chunk.approvalId } }),
  "tool-output-available": (chunk) => ({ state: "output-available", output: chunk.output }),
  "tool-output-error": (chunk) => ({ state: "output-error", errorText: chunk.errorText }),
  "tool-output-denied": () => ({ state: "output-denied" }),
};

// Fold one chunk into `message`; the part it changed (null when none did).
export function apply(message, chunk) {
  const type = chunk.type;
  if (type === "start") {
    if (chunk.messageId) message.id = chunk.messageId;
    Object.assign(message.metadata, chunk.messageMetadata || {});
    return null;
  }
  if (type === "message-metadata" || type === "finish") {
    Object.assign(message.metadata, chunk.messageMetadata || {});
    if (type === "finish") message.finishReason = chunk.finishReason;
    return null;
  }
  for (const kind of ["text", "reasoning"]) {
    if (type === `${kind}-start`) return streamed(message, kind, chunk.id);
    if (type === `${kind}-delta`) {
      const part = streamed(message, kind, chunk.id);
      part.text += chunk.delta;
      return part;
    }
    if (type === `${kind}-end`) return Object.assign(streamed(message, kind, chunk.id), { state: "done" });
  }
  if (TOOL_CHUNKS[type]) {
    const part = tool(message, chunk, type === "tool-input-start" || type === "tool-input-available");
    return Object.assign(part, TOOL_CHUNKS[type](chunk));
  }
  if (type === "tool-approval-response") {
    const part = message.parts.findLast((p) => p.type === "tool" && p.approval && p.approval.id === chunk.approvalId);
    if (!part) return null;
    part.approval.approved = chunk.approved;
    if (chunk.reason) part.approval.reason = chunk.reason;
    part.state = "approval-responded";
    return part;
  }
  if (type === "error") {
    const part = { type: "error", errorText: chunk.errorText };
    message.parts.push(part);
    return part;
  }
  if (type.startsWith("data-")) {
    let part = chunk.id ? message.parts.find((p) => p.type === type && p.id === chunk.id) : null;
    if (!part) {
      part = { type, id: chunk.id };
      message.parts.push(part);
    }
    part.data = chunk.data;
    return part;
  }
  return null; // start-step, finish-step, and what this page does not show
}
