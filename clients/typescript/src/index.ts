/**
 * A TypeScript client of the jevmem HTTP API. Every request and response type comes from the API's
 * OpenAPI document (`openapi.json`, generated into `schema.d.ts` by openapi-typescript); this file
 * only names the calls an agent makes.
 *
 * Contract: results are the API's JSON. `remember` returns the per-item report whether or not some
 * items were refused (HTTP 422 with a report is not an error here); `forget` returns the API's
 * result, `{status: "not_found"}` included; `nodes` of a conversation the tenant does not have is
 * `[]`. Every other non-2xx answer throws `MemoryApiError` with the status, the API's `detail` and,
 * when the server names one, the `Retry-After` seconds.
 */
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, paths };
export type Observation = paths["/v1/observations"]["post"]["requestBody"]["content"]["application/json"][number];
export type IngestReport = components["schemas"]["IngestResponse"];
export type Recall = components["schemas"]["Recall"];
export type QueryResult = components["schemas"]["QueryResponse"];
export type PromptEvidence = components["schemas"]["PromptEvidence"];
export type Conversation = components["schemas"]["Conversation"];
export type MemoryNode = paths["/v1/conversations/{conversation_id}/nodes"]["get"]["responses"][200]["content"]["application/json"][number];

export class MemoryApiError extends Error {
  constructor(readonly status: number, readonly detail: unknown, readonly retryAfter: number | null) {
    super(`HTTP ${status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
    this.name = "MemoryApiError";
  }
}

export interface ClientOptions {
  /** e.g. `http://127.0.0.1:8080` */
  baseUrl: string;
  /** An API key (`jm_...`); its tenant owns everything this client reads and writes. */
  apiKey: string;
  /** A fetch implementation (default: the global one). */
  fetch?: typeof fetch;
}

function fail(response: Response, error: unknown): never {
  const detail = error && typeof error === "object" && "detail" in error ? (error as { detail: unknown }).detail : error;
  const after = response.headers.get("retry-after");
  throw new MemoryApiError(response.status, detail, after && /^\d+$/.test(after) ? Number(after) : null);
}

export class MemoryClient {
  private readonly http;

  constructor(options: ClientOptions) {
    this.http = createClient<paths>({
      baseUrl: options.baseUrl.replace(/\/$/, ""),
      headers: { Authorization: `Bearer ${options.apiKey}` },
      fetch: options.fetch,
    });
  }

  /** Write observations (each needs `event_id` and `content`; `conversationId` fills items without one). */
  async remember(observations: Array<Omit<Observation, "conversation_id"> & { conversation_id?: string }>,
                 conversationId?: string): Promise<IngestReport> {
    const body = observations.map((o) => ({ ...o, conversation_id: o.conversation_id ?? conversationId ?? "" }));
    const { data, error, response } = await this.http.POST("/v1/observations", { body });
    if (data) return data;
    if (response.status === 422 && error && typeof error === "object" && "accepted" in error) return error as IngestReport;
    return fail(response, error);
  }

  /** Evidence for `question` from the given conversations, or all of the key's; merged, best first. */
  async recall(question: string, options: { conversationIds?: string[]; topK?: number } = {}): Promise<Recall> {
    return (await this.recallAs(question, "json", options)) as Recall;
  }

  /** `recall`'s evidence as the compact lines System Two reads (`lines`, and `text` joined), for a prompt. */
  async recallLines(question: string, options: { conversationIds?: string[]; topK?: number } = {}):
      Promise<PromptEvidence> {
    return (await this.recallAs(question, "prompt", options)) as PromptEvidence;
  }

  private async recallAs(question: string, format: "json" | "prompt",
                         options: { conversationIds?: string[]; topK?: number }): Promise<Recall | PromptEvidence> {
    const { data, error, response } = await this.http.POST("/v1/recall", {
      body: { question, top_k: options.topK ?? 10, conversation_ids: options.conversationIds ?? null, format },
    });
    return data ?? fail(response, error);
  }

  /** Evidence from one conversation with the full trace (and an answer when System Two is configured). */
  async query(conversationId: string, question: string, options: { topK?: number; answer?: boolean } = {}):
      Promise<QueryResult> {
    const { data, error, response } = await this.http.POST("/v1/query", {
      body: { conversation_id: conversationId, question, top_k: options.topK ?? 10, answer: options.answer ?? false,
              format: "json" },
    });
    return (data as QueryResult | undefined) ?? fail(response, error);
  }

  /** The tenant's conversations with their node counts. */
  async conversations(): Promise<Conversation[]> {
    const { data, error, response } = await this.http.GET("/v1/conversations");
    return data ?? fail(response, error);
  }

  /** A conversation's memory nodes by seq; `[]` when the tenant has no such conversation. */
  async nodes(conversationId: string): Promise<MemoryNode[]> {
    const { data, error, response } = await this.http.GET("/v1/conversations/{conversation_id}/nodes", {
      params: { path: { conversation_id: conversationId } },
    });
    if (response.status === 404) return [];
    return data ?? fail(response, error);
  }

  /** Forget one observation (`eventId`) or the whole conversation (an admin key). */
  async forget(conversationId: string, eventId?: string): Promise<unknown> {
    const { data, error, response } = eventId === undefined
      ? await this.http.DELETE("/v1/conversations/{conversation_id}", {
          params: { path: { conversation_id: conversationId } } })
      : await this.http.DELETE("/v1/conversations/{conversation_id}/observations/{event_id}", {
          params: { path: { conversation_id: conversationId, event_id: eventId } } });
    if (data !== undefined) return data;
    if (response.status === 404) return error;
    return fail(response, error);
  }
}
