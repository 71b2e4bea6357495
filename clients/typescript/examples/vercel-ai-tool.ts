/**
 * jevmem as Vercel AI SDK tools: `remember` and `recall` for `generateText({ tools })`.
 *
 *   const tools = memoryTools(new MemoryClient({ baseUrl, apiKey }), "chat-42");
 *   await generateText({ model, tools, prompt: "What is my dog called?" });
 */
import { tool } from "ai";
import { z } from "zod";
import { MemoryClient } from "../src/index.js";

export function memoryTools(client: MemoryClient, conversationId: string) {
  return {
    remember: tool({
      description: "Keep something the user said, for later turns and sessions.",
      inputSchema: z.object({ text: z.string().min(1), speaker: z.string().optional() }),
      execute: async ({ text, speaker }) => {
        const report = await client.remember(
          [{ event_id: crypto.randomUUID(), content: text, speaker: speaker ?? null }], conversationId);
        return { kept: report.accepted };
      },
    }),
    recall: tool({
      description: "Find what the user said earlier that bears on a question (dated lines, best first).",
      inputSchema: z.object({ question: z.string().min(1) }),
      execute: async ({ question }) => {
        // the server's prompt lines: recording date, the dates spoken of, speaker, text, what superseded it
        const found = await client.recall(question, { conversationIds: [conversationId], topK: 5, format: "prompt" });
        return found.lines;
      },
    }),
  };
}
