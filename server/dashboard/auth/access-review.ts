import type { KubeApi } from '../../sources/k8s/api-request.ts';

/** ReviewedUser is who the API server says a token belongs to (TokenReview status.user). */
export interface ReviewedUser {
  readonly username: string;
  readonly uid?: string;
  readonly groups: readonly string[];
  readonly extra?: Readonly<Record<string, readonly string[]>>;
  /** audiences: those the API server says the token is valid for, out of the ones asked (TokenReview status.audiences). */
  readonly audiences?: readonly string[];
}

/** ResourceAttributes are the SubjectAccessReview attributes a dashboard request is checked against. */
export interface ResourceAttributes {
  readonly group: string;
  readonly resource: string;
  readonly subresource: string;
  readonly name: string;
  readonly verb: string;
}

/**
 * dashboardAttributes names what a dashboard caller needs, as kube-rbac-proxy
 * names an upstream: the virtual subresource "kproxy" of this node's Node
 * object, verb "get" for every view (pages, API reads, the live stream) and
 * "update" for actions (resync, cleanup, pause, resume). RBAC matches the
 * resource "nodes/kproxy" literally; it is not nodes/proxy, so dashboard users
 * get no access to the kubelet's API.
 */
export function dashboardAttributes(nodeName: string, permission: 'view' | 'act'): ResourceAttributes {
  return { group: '', resource: 'nodes', subresource: 'kproxy', name: nodeName, verb: permission === 'act' ? 'update' : 'get' };
}

/** AccessReviewer asks the API server about a caller (TokenReview, SubjectAccessReview); a fake sits beside it. */
export interface AccessReviewer {
  /**
   * reviewToken: who the token belongs to, or null when the API server does
   * not authenticate it for any of the audiences (TokenReview spec.audiences).
   * signal, when it aborts, abandons the request (the review took too long).
   */
  reviewToken(token: string, audiences: readonly string[], signal?: AbortSignal): Promise<ReviewedUser | null>;
  reviewAccess(user: ReviewedUser, attrs: ResourceAttributes, signal?: AbortSignal): Promise<{ allowed: boolean; reason: string }>;
}

interface TokenReviewStatus {
  authenticated?: boolean;
  user?: { username?: string; uid?: string; groups?: string[]; extra?: Record<string, string[]> };
  audiences?: string[];
}

/**
 * ApiAccessReviewer sends the reviews to the API server as JSON, with kproxy's
 * own credentials. A signal that aborts ends the HTTP request: a review kproxy
 * stopped waiting for must not keep a connection to the API server open (and
 * a hung API server would otherwise collect one per token).
 */
export class ApiAccessReviewer implements AccessReviewer {
  readonly #api: KubeApi;

  constructor(api: KubeApi) {
    this.#api = api;
  }

  async reviewToken(token: string, audiences: readonly string[], signal?: AbortSignal): Promise<ReviewedUser | null> {
    const res = await this.#api.request<{ status?: TokenReviewStatus }>('POST', '/apis/authentication.k8s.io/v1/tokenreviews', {
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token, audiences: [...audiences] } },
      signal,
    });
    const st = res.status;
    if (!st?.authenticated || !st.user?.username) return null;
    return { username: st.user.username, uid: st.user.uid, groups: st.user.groups ?? [], extra: st.user.extra, audiences: st.audiences ?? [] };
  }

  async reviewAccess(user: ReviewedUser, attrs: ResourceAttributes, signal?: AbortSignal): Promise<{ allowed: boolean; reason: string }> {
    const res = await this.#api.request<{ status?: { allowed?: boolean; reason?: string } }>('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
      body: {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: {
          user: user.username,
          uid: user.uid,
          groups: [...user.groups],
          extra: user.extra ? Object.fromEntries(Object.entries(user.extra).map(([k, v]) => [k, [...v]])) : undefined,
          resourceAttributes: { ...attrs },
        },
      },
      signal,
    });
    return { allowed: res.status?.allowed === true, reason: res.status?.reason ?? '' };
  }
}
