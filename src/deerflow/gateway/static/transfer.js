// Export to a file and import from one (a JSON document or a Markdown zip).

import { call, send } from "./api.js";
import { download } from "./dom.js";

const EXTENSIONS = { json: "json", markdown: "zip" };

/** Download the memory of `agent` (null: the default bucket) as `format` ("json" | "markdown"). */
export async function exportMemory(format, agent) {
  const response = await send("GET", "/api/memory/export", {
    query: { format, agent_name: agent },
  });
  const name = `memory-${agent ?? "default"}.${EXTENSIONS[format]}`;
  download(await response.blob(), name);
  return name;
}

/** Import `file` (a JSON export or a Markdown zip) into `agent`'s bucket; return the document. */
export async function importMemory(file, agent) {
  // Uploaded as is: the server tells a zip from JSON and validates either.
  const form = new FormData();
  form.append("file", file, file.name);
  return call("POST", "/api/memory/import", { query: { agent_name: agent }, form });
}
