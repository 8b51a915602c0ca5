// The chat panel: one lead-agent turn per message, streamed as server-sent events.
// EventSource only sends GET, so the POST's response body is read and split into events here.

import { send } from "./api.js";
import { el } from "./dom.js";

/** The server-sent events of `response`, as `{event, data}`. */
export async function* serverEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, "\n");
    let end = buffer.indexOf("\n\n");
    while (end >= 0) {
      const event = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (event !== null) yield event;
      end = buffer.indexOf("\n\n");
    }
  }
}

function parseEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (name === "event") event = value;
    else if (name === "data") data.push(value);
  }
  return data.length === 0 && event === "message" ? null : { event, data: data.join("\n") };
}

/** A new thread id, unique enough to never meet another tab's. */
export function newThreadId() {
  return `web-${crypto.randomUUID()}`;
}

/**
 * Send `message` on `threadId` and stream the reply into `log`.
 *
 * The route answers server-sent events: `token` `{content}` for each piece of the reply,
 * `error` `{error, detail}` if the turn fails, `done` `{}` at the end. Others are ignored.
 * @throws {import("./api.js").ApiError} when the route refuses the request (401, 404, 501, …)
 */
export async function sendMessage(log, threadId, message, agent) {
  log.append(el("p", { class: "chat-user" }, el("strong", {}, "You: "), message));
  const response = await send("POST", `/api/chat/${encodeURIComponent(threadId)}`, {
    query: { agent_name: agent },
    json: { message },
  });
  const reply = el("span", {});
  const line = el("p", { class: "chat-agent" }, el("strong", {}, "Agent: "), reply);
  log.append(line);
  const problem = await streamReply(response, reply, log);
  if (problem !== null) {
    line.classList.add("chat-error");
    line.append(el("span", { class: "chat-failure" }, ` ${problem}`));
  }
}

/** Append the reply's tokens to `reply`; return what went wrong, or null. */
async function streamReply(response, reply, log) {
  try {
    for await (const { event, data } of serverEvents(response)) {
      if (event === "done") return null;
      if (event === "error") return `The turn failed: ${JSON.parse(data).detail}`;
      if (event === "token") reply.textContent += JSON.parse(data).content;
      log.scrollTop = log.scrollHeight;
    }
  } catch (error) {
    return `The reply could not be read (${error.message}).`;
  }
  return "The reply was cut off before it ended.";
}
