import { createHash, timingSafeEqual } from 'node:crypto';
import type { Clock } from '../../clock.ts';
import { AuthFailedError, AuthRequiredError, AuthUnavailableError, errorMessage, ForbiddenError, type KproxyError } from '../../errors.ts';
import type { AuthMode, Viewer } from '../protocol.ts';
import { dashboardAttributes, type AccessReviewer, type ReviewedUser } from './access-review.ts';

export type Permission = 'view' | 'act';

/** AuthOutcome: a viewer, or the catalogue error to answer with (its statusCode: 401, 403 or 503). */
export type AuthOutcome = { readonly ok: true; readonly viewer: Viewer } | { readonly ok: false; readonly error: KproxyError };

export interface DashboardAuthOptions {
  /** token: the static bearer token (--dashboard-token-file), or null. */
  token: string | null;
  /** reviewer: delegated auth through the API server, or null. */
  reviewer: AccessReviewer | null;
  nodeName: string;
  clock: Clock;
  /** cacheTtlMs: how long review answers are reused (default 60 s; denials 10 s). */
  cacheTtlMs?: number;
}

/** TOKEN_USER is the user name of whoever presents the static token (audit lines and Events name it). */
export const TOKEN_USER = 'token';
/** ANONYMOUS_USER is the caller when auth is off (loopback only). */
export const ANONYMOUS_USER = 'anonymous';

const CACHE_MAX = 1000;

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/**
 * DashboardAuth decides who a dashboard caller is and what they may do:
 * the static token (compared in constant time, on digests so length leaks
 * nothing), else delegated auth (TokenReview, then SubjectAccessReview per
 * permission, answers cached briefly by token digest), else, with neither
 * configured, everyone on the loopback listener may view and act (the CLI
 * refuses a non-loopback bind in that case).
 */
export class DashboardAuth {
  readonly mode: AuthMode;
  readonly #o: DashboardAuthOptions;
  readonly #tokenDigest: Buffer | null;
  readonly #users = new Map<string, { user: ReviewedUser | null; until: number }>();
  readonly #decisions = new Map<string, { allowed: boolean; until: number }>();

  constructor(opts: DashboardAuthOptions) {
    this.#o = opts;
    this.#tokenDigest = opts.token ? digest(opts.token) : null;
    this.mode = opts.token && opts.reviewer ? 'token+delegated' : opts.token ? 'token' : opts.reviewer ? 'delegated' : 'off';
  }

  get enabled(): boolean {
    return this.mode !== 'off';
  }

  /** check authenticates a bearer credential (null: none presented) for a permission. */
  async check(credential: string | null, permission: Permission): Promise<AuthOutcome> {
    if (!this.enabled) return { ok: true, viewer: { authMode: 'off', user: ANONYMOUS_USER, canAct: true } };
    if (!credential) return { ok: false, error: new AuthRequiredError('the dashboard needs a bearer token (Authorization: Bearer …)') };
    if (this.#tokenDigest && timingSafeEqual(digest(credential), this.#tokenDigest)) {
      return { ok: true, viewer: { authMode: this.mode, user: TOKEN_USER, canAct: true } };
    }
    const reviewer = this.#o.reviewer;
    if (!reviewer) return { ok: false, error: new AuthFailedError('the bearer token is not the dashboard token') };
    try {
      const key = digest(credential).toString('hex');
      const user = await this.#user(reviewer, key, credential);
      if (!user) return { ok: false, error: new AuthFailedError('the API server did not authenticate the bearer token (TokenReview)') };
      const [view, act] = await Promise.all([this.#allowed(reviewer, user, 'view'), this.#allowed(reviewer, user, 'act')]);
      const granted = permission === 'act' ? act : view;
      if (!granted) {
        const attrs = dashboardAttributes(this.#o.nodeName, permission);
        return { ok: false, error: new ForbiddenError(`user "${user.username}" may not ${attrs.verb} nodes/${attrs.subresource} ${attrs.name} (SubjectAccessReview)`) };
      }
      return { ok: true, viewer: { authMode: this.mode, user: user.username, canAct: act } };
    } catch (err) {
      // The API server could not be asked: refuse (never fail open) and say why.
      return { ok: false, error: new AuthUnavailableError(`cannot check the bearer token with the API server: ${errorMessage(err)}`, { cause: err }) };
    }
  }

  async #user(reviewer: AccessReviewer, key: string, token: string): Promise<ReviewedUser | null> {
    const now = this.#o.clock.now();
    const hit = this.#users.get(key);
    if (hit && hit.until > now) return hit.user;
    const user = await reviewer.reviewToken(token);
    remember(this.#users, key, { user, until: now + (user ? this.#ttl : 10_000) });
    return user;
  }

  async #allowed(reviewer: AccessReviewer, user: ReviewedUser, permission: Permission): Promise<boolean> {
    const now = this.#o.clock.now();
    const key = `${user.username}\u0000${user.groups.join(',')}\u0000${permission}`;
    const hit = this.#decisions.get(key);
    if (hit && hit.until > now) return hit.allowed;
    const { allowed } = await reviewer.reviewAccess(user, dashboardAttributes(this.#o.nodeName, permission));
    remember(this.#decisions, key, { allowed, until: now + (allowed ? this.#ttl : 10_000) });
    return allowed;
  }

  get #ttl(): number {
    return this.#o.cacheTtlMs ?? 60_000;
  }
}

/** remember stores into a bounded cache (the oldest entry goes first). */
function remember<V>(cache: Map<string, V>, key: string, value: V): void {
  cache.delete(key);
  cache.set(key, value);
  if (cache.size > CACHE_MAX) cache.delete(cache.keys().next().value!);
}

/** bearerFromHeader reads "Authorization: Bearer <token>". */
export function bearerFromHeader(header: string | undefined): string | null {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return m ? m[1] : null;
}
