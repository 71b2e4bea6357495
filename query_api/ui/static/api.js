// The page's only way to the API: every call carries the signed-in key as a Bearer token.

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

function detailOf(body, fallback) {
  if (body && typeof body.detail === "string") return body.detail;
  if (body && Array.isArray(body.detail)) return body.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
  return fallback;
}

export class Api {
  constructor(key) {
    this.key = key;
  }

  /** JSON of a GET/POST, or an ApiError (status 0 when the server could not be reached). */
  async request(method, path, body) {
    const headers = { Authorization: `Bearer ${this.key}`, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res;
    try {
      res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
    } catch (err) {
      throw new ApiError(0, `server unreachable (${err.message})`);
    }
    let json = null;
    try {
      json = await res.json();
    } catch {
      json = null;
    }
    if (!res.ok) throw new ApiError(res.status, detailOf(json, res.statusText));
    return json;
  }

  get(path) {
    return this.request("GET", path);
  }

  post(path, body) {
    return this.request("POST", path, body);
  }
}

/** A sentence for a person: what went wrong with `what`. */
export function explain(err, what) {
  if (!(err instanceof ApiError)) return `${what} failed: ${err.message || err}`;
  switch (err.status) {
    case 0: return `${what} failed: the server could not be reached.`;
    case 401: return `${what}: the key was not accepted (unknown, revoked or malformed). Sign in again.`;
    case 403: return `${what}: not allowed for this key — ${err.detail}.`;
    case 503: return `${what}: the store is temporarily unavailable; try again in a few seconds.`;
    default: return `${what} failed (${err.status}): ${err.detail}`;
  }
}

export const enc = encodeURIComponent;
