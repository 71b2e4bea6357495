/**
 * A TypeScript client of the jevmem HTTP API. Every request and response type comes from the API's
 * OpenAPI document (`openapi.json`, generated into `schema.ts` by openapi-typescript); this file
 * names one method per operation of the API:
 *
 * | method | operation |
 * |---|---|
 * | `health()` | `GET /healthz` |
 * | `remember(observations, conversationId?, {userId})` | `POST /v1/observations` |
 * | `query(conversationId, question, {topK, answer, format})` | `POST /v1/query` |
 * | `recall(question, {conversationIds, userId, topK, format})` (and `recallLines`) | `POST /v1/recall` |
 * | `conversations()` | `GET /v1/conversations` |
 * | `decisions(conversationId)` | `GET /v1/conversations/{c}/decisions` |
 * | `nodes(conversationId, {tenantId})` | `GET /v1/conversations/{c}/nodes`, `/v1/tenants/{t}/conversations/{c}/nodes` |
 * | `edges(conversationId, {tenantId})` | `GET /v1/conversations/{c}/edges`, `/v1/tenants/{t}/conversations/{c}/edges` |
 * | `forget(conversationId, eventId?)` | `DELETE /v1/conversations/{c}`, `/v1/conversations/{c}/observations/{e}` |
 * | `deadLetters({limit})` | `GET /v1/dead-letters` |
 *
 * Contract: results are the API's JSON. `remember` returns the per-item report whether or not some
 * items were refused (HTTP 422 with a report is not an error here); `forget` returns the API's
 * result, `{status: "not_found"}` included; `nodes`, `edges` and `decisions` of a conversation the
 * tenant does not have are `[]`. `query` and `recall` answer every field (`format: "json"`, the
 * default) or the compact lines System Two reads (`format: "prompt"`: `{question, lines, text}`).
 * `userId` is sent only when given (`remember`: stamped on items without a `user_id`; `recall`:
 * only that user's memory). Every other non-2xx answer throws `MemoryApiError` with the status, the
 * API's `detail` and, when the server names one, the `Retry-After` seconds.
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
export type EdgeEvent = components["schemas"]["EdgeEvent"];
export type ConsolidationDecision = components["schemas"]["ConsolidationDecision"];
export type DeadLetter = components["schemas"]["DeadLetter"];
/** `json`: every field of every item; `prompt`: the compact lines System Two reads. */
export type Format = "json" | "prompt";

export interface RecallOptions {
  /** Search only these conversations; default: all of the tenant's. */
  conversationIds?: string[];
  /** Search only this user's memory (the observations that carried this `user_id`); default: every user's. */
  userId?: string;
  /** How many pieces of evidence (default 10). */
  topK?: number;
}

export interface QueryOptions {
  /** How many pieces of evidence (default 10). */
  topK?: number;
  /** Ask System Two for an answer too (when the server has one). */
  answer?: boolean;
}

export interface GraphOptions {
  /** Read through `/v1/tenants/{tenantId}/...`: the key's own tenant, else the API answers 403. */
  tenantId?: string;
}

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

/** A list read: the data, `[]` for a conversation the tenant does not have (404), else an error. */
function listed<T>(result: { data?: T[]; error?: unknown; response: Response }): T[] {
  if (result.data !== undefined) return result.data;
  if (result.response.status === 404) return [];
  return fail(result.response, result.error);
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

  /** The server's health (`GET /healthz`, no key needed). */
  async health(): Promise<Record<string, unknown>> {
    const { data, error, response } = await this.http.GET("/healthz");
    return data ?? fail(response, error);
  }

  /** Write observations (each needs `event_id` and `content`; `conversationId` and `userId` fill items without one). */
  async remember(observations: Array<Omit<Observation, "conversation_id"> & { conversation_id?: string }>,
                 conversationId?: string, options: { userId?: string } = {}): Promise<IngestReport> {
    const body = observations.map((o) => ({
      ...o,
      conversation_id: o.conversation_id ?? conversationId ?? "",
      ...(o.user_id == null && options.userId !== undefined ? { user_id: options.userId } : {}),
    }));
    const { data, error, response } = await this.http.POST("/v1/observations", { body });
    if (data) return data;
    if (response.status === 422 && error && typeof error === "object" && "accepted" in error) return error as IngestReport;
    return fail(response, error);
  }

  /** Evidence for `question` from the given conversations (or all of the key's, or one user's); merged, best first. */
  async recall(question: string, options?: RecallOptions & { format?: "json" }): Promise<Recall>;
  /** The same evidence as the lines System Two reads (`lines`, and `text` joined), for a prompt. */
  async recall(question: string, options: RecallOptions & { format: "prompt" }): Promise<PromptEvidence>;
  async recall(question: string, options: RecallOptions & { format?: Format } = {}): Promise<Recall | PromptEvidence> {
    const { data, error, response } = await this.http.POST("/v1/recall", {
      body: {
        question,
        top_k: options.topK ?? 10,
        format: options.format ?? "json",
        ...(options.conversationIds !== undefined ? { conversation_ids: options.conversationIds } : {}),
        ...(options.userId !== undefined ? { user_id: options.userId } : {}),
      },
    });
    return data ?? fail(response, error);
  }

  /** `recall` with `format: "prompt"`. */
  async recallLines(question: string, options: RecallOptions = {}): Promise<PromptEvidence> {
    return this.recall(question, { ...options, format: "prompt" });
  }

  /** Evidence from one conversation with the full trace (and an answer when System Two is configured). */
  async query(conversationId: string, question: string, options?: QueryOptions & { format?: "json" }): Promise<QueryResult>;
  /** The same evidence as the lines System Two reads (and the answer, when asked). */
  async query(conversationId: string, question: string, options: QueryOptions & { format: "prompt" }):
      Promise<PromptEvidence>;
  async query(conversationId: string, question: string, options: QueryOptions & { format?: Format } = {}):
      Promise<QueryResult | PromptEvidence> {
    const { data, error, response } = await this.http.POST("/v1/query", {
      body: { conversation_id: conversationId, question, top_k: options.topK ?? 10, answer: options.answer ?? false,
              format: options.format ?? "json" },
    });
    return data ?? fail(response, error);
  }

  /** The tenant's conversations with their node counts. */
  async conversations(): Promise<Conversation[]> {
    const { data, error, response } = await this.http.GET("/v1/conversations");
    return data ?? fail(response, error);
  }

  /** A conversation's consolidation decisions (redundant, obsolete, contradiction); `[]` when it has none. */
  async decisions(conversationId: string): Promise<ConsolidationDecision[]> {
    return listed(await this.http.GET("/v1/conversations/{conversation_id}/decisions", {
      params: { path: { conversation_id: conversationId } } }));
  }

  /** A conversation's memory nodes by seq; `[]` when the tenant has no such conversation. */
  async nodes(conversationId: string, options: GraphOptions = {}): Promise<MemoryNode[]> {
    return listed(options.tenantId === undefined
      ? await this.http.GET("/v1/conversations/{conversation_id}/nodes", {
          params: { path: { conversation_id: conversationId } } })
      : await this.http.GET("/v1/tenants/{tenant_id}/conversations/{conversation_id}/nodes", {
          params: { path: { tenant_id: options.tenantId, conversation_id: conversationId } } }));
  }

  /** A conversation's edges (the four views, with their probabilities); `[]` when it has none. */
  async edges(conversationId: string, options: GraphOptions = {}): Promise<EdgeEvent[]> {
    return listed(options.tenantId === undefined
      ? await this.http.GET("/v1/conversations/{conversation_id}/edges", {
          params: { path: { conversation_id: conversationId } } })
      : await this.http.GET("/v1/tenants/{tenant_id}/conversations/{conversation_id}/edges", {
          params: { path: { tenant_id: options.tenantId, conversation_id: conversationId } } }));
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

  /** The tenant's dead letters (refused input with its reason), newest last (an admin key). */
  async deadLetters(options: { limit?: number } = {}): Promise<DeadLetter[]> {
    const { data, error, response } = await this.http.GET("/v1/dead-letters", {
      params: { query: options.limit === undefined ? {} : { limit: options.limit } } });
    return data ?? fail(response, error);
  }
}
