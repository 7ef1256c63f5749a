import { createHash, timingSafeEqual } from 'node:crypto';
import type { Clock, TimerHandle } from '../../clock.ts';
import { AuthFailedError, AuthRequiredError, AuthUnavailableError, errorMessage, ForbiddenError, RateLimitedError, type KproxyError } from '../../errors.ts';
import { silentLogger, type Logger } from '../../log.ts';
import type { AuthMode, Viewer } from '../protocol.ts';
import { dashboardAttributes, type AccessReviewer, type ReviewedUser } from './access-review.ts';

export type Permission = 'view' | 'act';

/** AuthOutcome: a viewer, or the catalogue error to answer with (its statusCode: 401, 403, 429 or 503). */
export type AuthOutcome = { readonly ok: true; readonly viewer: Viewer } | { readonly ok: false; readonly error: KproxyError };

/** AuthFailure names why a credential was refused (the label of kproxy_dashboard_auth_failures_total). */
export type AuthFailure = 'missing' | 'invalid' | 'forbidden' | 'unavailable' | 'throttled';

export interface LoginThrottle {
  /** failures: invalid credentials from one address within windowMs before it is refused for blockMs. */
  readonly failures: number;
  readonly windowMs: number;
  readonly blockMs: number;
}

export interface DashboardAuthOptions {
  /** token: the static bearer token (--dashboard-token-file), or null. */
  token: string | null;
  /** reviewer: delegated auth through the API server, or null. */
  reviewer: AccessReviewer | null;
  nodeName: string;
  clock: Clock;
  /** audience: what the TokenReview asks for (--dashboard-token-audience); tokens issued for other audiences are refused. */
  audience?: string;
  logger?: Logger;
  /** cacheTtlMs: how long review answers are reused (default 60 s; refusals 10 s). */
  cacheTtlMs?: number;
  /** reviewTimeoutMs: a review the API server has not answered by then counts as unavailable (default 10 s). */
  reviewTimeoutMs?: number;
  /** throttle: refusing an address that keeps presenting invalid credentials (default 5 in 60 s blocks it for 60 s). */
  throttle?: LoginThrottle;
}

/** TOKEN_USER is the user name of whoever presents the static token (audit lines and Events name it). */
export const TOKEN_USER = 'token';
/** ANONYMOUS_USER is the caller when auth is off (loopback only). */
export const ANONYMOUS_USER = 'anonymous';
/** MIN_TOKEN_LENGTH: the static token's minimum length (a shared secret guessed over the network must be long). */
export const MIN_TOKEN_LENGTH = 32;
/** DEFAULT_AUDIENCE: the audience delegated auth asks for unless configured otherwise. */
export const DEFAULT_AUDIENCE = 'kproxy-dashboard';

const CACHE_MAX = 1000;
/** THROTTLED_QUEUE: tokens of one blocked address waiting for their review; more are refused without asking. */
const THROTTLED_QUEUE = 4;
/** THROTTLED_REVIEW_GAP_MS: the least time between two TokenReviews for one blocked address. */
const THROTTLED_REVIEW_GAP_MS = 1_000;
const DEFAULT_THROTTLE: LoginThrottle = { failures: 5, windowMs: 60_000, blockMs: 60_000 };

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/**
 * reviewKey is the cache key of one SubjectAccessReview: a digest of the
 * whole reviewed identity (name, uid, groups, extra, each as a list, so no two
 * different identities can spell the same key) and the permission. Two tokens
 * of one user with different groups or extra get different answers from RBAC,
 * so they must never share one.
 */
export function reviewKey(user: ReviewedUser, permission: Permission): string {
  const extra = Object.entries(user.extra ?? {})
    .map(([k, v]) => [k, [...v]] as const)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return digest(JSON.stringify([user.username, user.uid ?? null, [...user.groups], extra, permission])).toString('hex');
}

/**
 * DashboardAuth decides who a dashboard caller is and what they may do:
 * the static token (compared in constant time, on digests so length leaks
 * nothing), else delegated auth (a TokenReview for kproxy's audience, then a
 * SubjectAccessReview per permission; answers cached briefly, concurrent
 * identical reviews shared, reviews that hang refused after 10 s), else, with
 * neither configured, everyone on the loopback listener may view and act (the
 * CLI refuses a non-loopback dashboard in that case). An address that keeps
 * presenting invalid credentials is throttled for a while: what it presents
 * that fails is refused with 429 instead of 401. Every refusal is counted by
 * reason and logged without the token.
 * The throttle holds back only what fails: the static token, and a token whose
 * TokenReview answer is cached, pass from a blocked address at once; an
 * unknown token from it is reviewed, one at a time and at most once a second,
 * and refused (429) only when the API server does not authenticate it.
 */
export class DashboardAuth {
  readonly mode: AuthMode;
  readonly audience: string;
  readonly #o: DashboardAuthOptions;
  readonly #log: Logger;
  readonly #tokenDigest: Buffer | null;
  readonly #users = new Map<string, { user: ReviewedUser | null; why: string; until: number }>();
  readonly #decisions = new Map<string, { allowed: boolean; until: number }>();
  readonly #inflightUsers = new Map<string, Promise<{ user: ReviewedUser | null; why: string }>>();
  readonly #inflightDecisions = new Map<string, Promise<boolean>>();
  readonly #strikes = new Map<string, { since: number; count: number; blockedUntil: number }>();
  /** #lanes: per address that was blocked, its reviews queued one after another and when the last one began (#throttledReview). */
  readonly #lanes = new Map<string, { tail: Promise<void>; waiting: number; lastAt: number }>();
  /** failures counts refusals by reason. */
  readonly failures: Record<AuthFailure, number> = { missing: 0, invalid: 0, forbidden: 0, unavailable: 0, throttled: 0 };
  /** tokenReviews / accessReviews: reviews sent to the API server. */
  tokenReviews = 0;
  accessReviews = 0;

  constructor(opts: DashboardAuthOptions) {
    this.#o = opts;
    this.#log = opts.logger ?? silentLogger;
    this.audience = opts.audience ?? DEFAULT_AUDIENCE;
    this.#tokenDigest = opts.token ? digest(opts.token) : null;
    this.mode = opts.token && opts.reviewer ? 'token+delegated' : opts.token ? 'token' : opts.reviewer ? 'delegated' : 'off';
  }

  get enabled(): boolean {
    return this.mode !== 'off';
  }

  /** cacheTtlMs: how long an allowed review answer is reused (a WebSocket re-checks its viewer this often). */
  get cacheTtlMs(): number {
    return this.#o.cacheTtlMs ?? 60_000;
  }

  /**
   * check authenticates a bearer credential (null: none presented) for a
   * permission. remote is the caller's address: refusals are throttled per
   * address and logged with it.
   */
  async check(credential: string | null, permission: Permission, remote = 'unknown'): Promise<AuthOutcome> {
    if (!this.enabled) return { ok: true, viewer: { authMode: 'off', user: ANONYMOUS_USER, canAct: true } };
    if (!credential) return this.#refuse('missing', remote, new AuthRequiredError('the dashboard needs a bearer token (Authorization: Bearer …)'));
    // The right token is accepted whatever its address did before: the throttle
    // is for what fails, so five wrong guesses from an address (a NAT shared with
    // the operator, a mistyped script) never lock the real token out.
    if (this.#tokenDigest && timingSafeEqual(digest(credential), this.#tokenDigest)) {
      return { ok: true, viewer: { authMode: this.mode, user: TOKEN_USER, canAct: true } };
    }
    const reviewer = this.#o.reviewer;
    const blockedFor = this.#blockedFor(remote);
    if (!reviewer) {
      if (blockedFor > 0) return this.#throttled(remote, blockedFor);
      return this.#refuse('invalid', remote, new AuthFailedError('the bearer token is not the dashboard token'));
    }
    try {
      let answer = this.#knownUser(credential);
      if (!answer) {
        // A blocked address's unknown tokens still get their TokenReview (a valid
        // one must pass), but one at a time and paced (#throttledReview): guessing
        // from it costs the API server at most one review a second.
        answer = blockedFor > 0 ? await this.#throttledReview(reviewer, credential, remote) : await this.#user(reviewer, credential);
        if (answer === null) return this.#throttled(remote, this.#blockedFor(remote));
      }
      const { user, why } = answer;
      if (!user) {
        const still = this.#blockedFor(remote);
        return still > 0 ? this.#throttled(remote, still) : this.#refuse('invalid', remote, new AuthFailedError(why));
      }
      const [view, act] = await Promise.all([this.#allowed(reviewer, user, 'view'), this.#allowed(reviewer, user, 'act')]);
      const granted = permission === 'act' ? act : view;
      if (!granted) {
        const attrs = dashboardAttributes(this.#o.nodeName, permission);
        return this.#refuse('forbidden', remote, new ForbiddenError(`user "${user.username}" may not ${attrs.verb} nodes/${attrs.subresource} ${attrs.name} (SubjectAccessReview)`), user.username);
      }
      return { ok: true, viewer: { authMode: this.mode, user: user.username, canAct: act } };
    } catch (err) {
      // The API server could not be asked: refuse (never fail open). The log has why; the client only the code.
      return this.#refuse('unavailable', remote, new AuthUnavailableError(`cannot check the bearer token with the API server: ${errorMessage(err)}`, { cause: err }));
    }
  }

  /** #blockedFor: how long an address stays throttled (ms, 0 when it is not). */
  #blockedFor(remote: string): number {
    const s = this.#strikes.get(remote);
    return s ? Math.max(0, s.blockedUntil - this.#o.clock.monotonic()) : 0;
  }

  #throttled(remote: string, blockedForMs: number): AuthOutcome {
    return this.#refuse('throttled', remote, new RateLimitedError(`too many refused tokens from ${remote}; try again in ${Math.max(1, Math.ceil(blockedForMs / 1000))} s`));
  }

  /** #knownUser: a TokenReview answer still cached for this token, or null (no API call). */
  #knownUser(token: string): { user: ReviewedUser | null; why: string } | null {
    const hit = this.#users.get(digest(token).toString('hex'));
    return hit && hit.until > this.#o.clock.now() ? hit : null;
  }

  /**
   * #throttledReview reviews a token from a blocked address: after the
   * address's previous review and at least THROTTLED_REVIEW_GAP_MS after it,
   * with at most THROTTLED_QUEUE tokens waiting; null (refused without asking)
   * when the queue is full. A valid token from a blocked address so gets in
   * within a few seconds unless the same address keeps the queue full.
   */
  async #throttledReview(reviewer: AccessReviewer, token: string, remote: string): Promise<{ user: ReviewedUser | null; why: string } | null> {
    let lane = this.#lanes.get(remote);
    // Kept once idle (bounded like the other caches): the pacing counts from this address's last review.
    if (!lane) remember(this.#lanes, remote, (lane = { tail: Promise.resolve(), waiting: 0, lastAt: -Infinity }));
    if (lane.waiting >= THROTTLED_QUEUE) return null;
    lane.waiting++;
    const before = lane.tail;
    let done!: () => void;
    lane.tail = new Promise<void>((resolve) => (done = resolve));
    try {
      await before;
      const wait = lane.lastAt + THROTTLED_REVIEW_GAP_MS - this.#o.clock.monotonic();
      if (wait > 0) await new Promise<void>((resolve) => this.#o.clock.setTimeout(resolve, wait));
      lane.lastAt = this.#o.clock.monotonic();
      return await this.#user(reviewer, token);
    } finally {
      lane.waiting--;
      done();
    }
  }

  #refuse(reason: AuthFailure, remote: string, error: KproxyError, user?: string): AuthOutcome {
    this.failures[reason]++;
    if (reason === 'invalid') this.#strike(remote);
    // A browser's first request carries no token (it shows the login form then): not worth a warning.
    const fields = { reason, from: remote, ...(user ? { user } : {}), code: error.code };
    if (reason === 'missing') this.#log.debug('dashboard request without a token', fields);
    else if (reason === 'unavailable') this.#log.error(`dashboard sign-in could not be checked: ${error.message}`, fields);
    else this.#log.warn(`dashboard sign-in refused: ${error.message}`, fields);
    return { ok: false, error };
  }

  #strike(remote: string): void {
    const t = this.#o.throttle ?? DEFAULT_THROTTLE;
    const now = this.#o.clock.monotonic();
    let s = this.#strikes.get(remote);
    if (!s || now - s.since > t.windowMs) s = { since: now, count: 0, blockedUntil: 0 };
    s.count++;
    if (s.count >= t.failures) {
      s.blockedUntil = now + t.blockMs;
      this.#log.warn('dashboard sign-in throttled: too many refused tokens from one address', { from: remote, refused: s.count, blockedForS: Math.round(t.blockMs / 1000) });
      s.count = 0;
      s.since = now;
    }
    remember(this.#strikes, remote, s);
  }

  async #user(reviewer: AccessReviewer, token: string): Promise<{ user: ReviewedUser | null; why: string }> {
    const key = digest(token).toString('hex');
    const hit = this.#users.get(key);
    if (hit && hit.until > this.#o.clock.now()) return hit;
    let pending = this.#inflightUsers.get(key);
    if (!pending) {
      pending = this.#reviewToken(reviewer, token).finally(() => this.#inflightUsers.delete(key));
      this.#inflightUsers.set(key, pending);
    }
    const answer = await pending;
    remember(this.#users, key, { ...answer, until: this.#o.clock.now() + (answer.user ? this.cacheTtlMs : 10_000) });
    return answer;
  }

  async #reviewToken(reviewer: AccessReviewer, token: string): Promise<{ user: ReviewedUser | null; why: string }> {
    this.tokenReviews++;
    const user = await this.#timed('TokenReview', (signal) => reviewer.reviewToken(token, [this.audience], signal));
    if (!user) return { user: null, why: 'the API server did not authenticate the bearer token (TokenReview)' };
    // An API server that ignores audiences would authenticate any token of the user: it must say which audience it checked.
    if (!user.audiences?.includes(this.audience)) {
      return {
        user: null,
        why: `the bearer token was not issued for the audience "${this.audience}" (kubectl create token … --audience ${this.audience}); the API server answered for ${JSON.stringify(user.audiences ?? [])}`,
      };
    }
    return { user, why: '' };
  }

  async #allowed(reviewer: AccessReviewer, user: ReviewedUser, permission: Permission): Promise<boolean> {
    const key = reviewKey(user, permission);
    const hit = this.#decisions.get(key);
    if (hit && hit.until > this.#o.clock.now()) return hit.allowed;
    let pending = this.#inflightDecisions.get(key);
    if (!pending) {
      this.accessReviews++;
      pending = this.#timed('SubjectAccessReview', (signal) => reviewer.reviewAccess(user, dashboardAttributes(this.#o.nodeName, permission), signal))
        .then((r) => r.allowed)
        .finally(() => this.#inflightDecisions.delete(key));
      this.#inflightDecisions.set(key, pending);
    }
    const allowed = await pending;
    remember(this.#decisions, key, { allowed, until: this.#o.clock.now() + (allowed ? this.cacheTtlMs : 10_000) });
    return allowed;
  }

  /**
   * #timed rejects when the API server has not answered a review within
   * reviewTimeoutMs, and aborts the review's request then.
   */
  #timed<T>(what: string, review: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const ms = this.#o.reviewTimeoutMs ?? 10_000;
    const abort = new AbortController();
    let timer: TimerHandle | null = null;
    const timeout = new Promise<never>((_resolve, reject) => {
      timer = this.#o.clock.setTimeout(() => {
        reject(new Error(`the ${what} got no answer within ${Math.round(ms / 1000)} s`));
        abort.abort();
      }, ms);
    });
    return Promise.race([review(abort.signal), timeout]).finally(() => {
      if (timer) this.#o.clock.clearTimeout(timer);
    });
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
