// The client against a running jevmem server: JEVMEM_URL and JEVMEM_API_KEY (a key with the
// ingest, query and admin scopes of a tenant that has no data yet).
import assert from "node:assert/strict";
import { test } from "node:test";
import { MemoryApiError, MemoryClient } from "../src/index.js";
import { memoryTools } from "../examples/vercel-ai-tool.js";

const baseUrl = process.env.JEVMEM_URL ?? "";
const apiKey = process.env.JEVMEM_API_KEY ?? "";
const client = new MemoryClient({ baseUrl, apiKey });

test("remember, recall, query, list, read back and forget", async () => {
  const report = await client.remember([
    { event_id: "t1", content: "I adopted a golden retriever puppy named Biscuit", speaker: "Ana" },
    { event_id: "t2", content: "I am training for the Berlin marathon", speaker: "Ben" },
  ], "ts-chat");
  assert.equal(report.accepted, 2);
  const found = await client.recall("What is the puppy called?", { conversationIds: ["ts-chat"], topK: 1 });
  assert.equal(found.evidence[0].content, "I adopted a golden retriever puppy named Biscuit");
  const q = await client.query("ts-chat", "Which marathon?", { topK: 1 });
  assert.equal(q.evidence[0].event_id, "t2");
  const lines = await client.recallLines("What is the puppy called?", { conversationIds: ["ts-chat"], topK: 1 });
  assert.equal(lines.lines.length, 1);  // no observed_at sent: recorded when accepted, today
  assert.match(lines.lines[0], /^\[recorded \d{4}-\d{2}-\d{2}\] Ana: I adopted a golden retriever puppy named Biscuit$/);
  assert.deepEqual((await client.conversations()).map((c) => c.conversation_id), ["ts-chat"]);
  assert.deepEqual((await client.nodes("ts-chat")).map((n) => n.event_id), ["t1", "t2"]);
  assert.deepEqual(await client.nodes("no-such-chat"), []);
  await client.forget("ts-chat", "t2");
  assert.deepEqual((await client.nodes("ts-chat")).map((n) => n.event_id), ["t1"]);
  await client.forget("ts-chat");
  assert.deepEqual(await client.nodes("ts-chat"), []);
});

test("a partly invalid batch reports what was refused; a wrong key throws", async () => {
  const report = await client.remember([{ event_id: "ok", content: "fine" }, { event_id: "bad", content: "" }], "ts-422");
  assert.equal(report.accepted, 1);
  assert.equal(report.rejected, 1);
  const wrong = new MemoryClient({ baseUrl, apiKey: "jm_0123456789abcdef_wrong" });
  await assert.rejects(wrong.conversations(), (e: unknown) => e instanceof MemoryApiError && e.status === 401);
  await client.forget("ts-422");
});

test("the Vercel AI SDK tools remember and recall", async () => {
  const tools = memoryTools(client, "ts-tools");
  const opts = { toolCallId: "c1", messages: [], context: {} };
  assert.deepEqual(await tools.remember.execute!({ text: "My cat is called Miso", speaker: "Ana" }, opts), { kept: 1 });
  const lines = await tools.recall.execute!({ question: "What is the cat called?" }, opts);
  assert.ok(Array.isArray(lines) && lines[0] === "Ana: My cat is called Miso");
  await client.forget("ts-tools");
});
