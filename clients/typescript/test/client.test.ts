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
  const qLines = await client.query("ts-chat", "Which marathon?", { topK: 1, format: "prompt" });
  assert.equal(qLines.question, "Which marathon?");
  assert.match(qLines.text, /Ben: I am training for the Berlin marathon$/);
  const same = await client.recall("What is the puppy called?", { conversationIds: ["ts-chat"], topK: 1, format: "prompt" });
  assert.deepEqual(same.lines, (await client.recallLines("What is the puppy called?", { conversationIds: ["ts-chat"], topK: 1 })).lines);
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
  assert.ok(Array.isArray(lines) && /^\[recorded \d{4}-\d{2}-\d{2}\] Ana: My cat is called Miso$/.test(lines[0]));
  await client.forget("ts-tools");
});

test("health, the graph reads, the tenant paths and dead letters", async () => {
  assert.equal((await client.health()).status, "ok");
  await client.remember([
    { event_id: "g1", content: "I adopted a puppy named Biscuit", speaker: "Ana" },
    { event_id: "g2", content: "Biscuit the puppy loves the beach", speaker: "Ana" },
  ], "ts-graph");
  const nodes = await client.nodes("ts-graph");
  assert.deepEqual(nodes.map((n) => n.event_id), ["g1", "g2"]);
  const tenant = nodes[0].tenant_id;
  assert.deepEqual((await client.nodes("ts-graph", { tenantId: tenant })).map((n) => n.id), nodes.map((n) => n.id));
  const edges = await client.edges("ts-graph");
  assert.ok(Array.isArray(edges));
  assert.ok(edges.every((e) => e.conversation_id === "ts-graph" && nodes.some((n) => n.id === e.source)));
  assert.deepEqual(await client.edges("ts-graph", { tenantId: tenant }), edges);
  assert.ok(Array.isArray(await client.decisions("ts-graph")));
  assert.deepEqual(await client.edges("no-such-chat"), []);
  assert.deepEqual(await client.decisions("no-such-chat"), []);
  await assert.rejects(client.nodes("ts-graph", { tenantId: "someone-else" }),
                       (e: unknown) => e instanceof MemoryApiError && e.status === 403);
  await client.remember([{ event_id: "dl", content: "" }], "ts-graph");  // refused: a dead letter
  const letters = await client.deadLetters({ limit: 5 });
  assert.ok(letters.length >= 1 && letters.length <= 5);
  assert.equal(letters[letters.length - 1].event_id, "dl");
  assert.match(letters[letters.length - 1].reason, /content/);
  await client.forget("ts-graph");
});

test("a user's memory: remember stamps userId, recall searches only that user's", async () => {
  await client.remember([{ event_id: "u1", content: "My cat Miso sleeps on the piano", speaker: "Ana" }], "ts-ana-1",
                        { userId: "ana" });
  await client.remember([{ event_id: "u2", content: "My cat Pixel sleeps on the piano", speaker: "Bo" }], "ts-bo-1",
                        { userId: "bo" });
  assert.deepEqual((await client.nodes("ts-ana-1")).map((n) => n.user_id), ["ana"]);
  const ana = await client.recall("Whose cat sleeps on the piano?", { userId: "ana", topK: 5 });
  assert.deepEqual([...new Set(ana.evidence.map((e) => e.conversation_id))], ["ts-ana-1"]);
  const both = await client.recall("Whose cat sleeps on the piano?", { topK: 5 });
  assert.deepEqual(new Set(both.evidence.map((e) => e.conversation_id)), new Set(["ts-ana-1", "ts-bo-1"]));
  const lines = await client.recall("Whose cat sleeps on the piano?", { userId: "bo", topK: 5, format: "prompt" });
  assert.deepEqual(lines.lines.map((l) => l.replace(/^\[[^\]]*\] /, "")), ["Bo: My cat Pixel sleeps on the piano"]);
  await client.forget("ts-ana-1");
  await client.forget("ts-bo-1");
});
