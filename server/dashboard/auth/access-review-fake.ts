import type { AccessReviewer, ResourceAttributes, ReviewedUser } from './access-review.ts';

/**
 * FakeAccessReviewer answers reviews from tables: tokens -> users (valid for
 * the audience "kproxy-dashboard" unless the user lists its own), and the
 * "user verb" pairs that are allowed (or a decide function over the whole
 * reviewed identity). It counts calls, so tests can check caching.
 */
export class FakeAccessReviewer implements AccessReviewer {
  readonly users = new Map<string, ReviewedUser>();
  readonly allowed = new Set<string>();
  tokenReviews = 0;
  accessReviews = 0;
  /** failing: every review rejects (API server unreachable). */
  failing = false;
  /** hang: reviews never answer (an API server that accepted the connection and went quiet) until their signal aborts. */
  hang = false;
  /** abandoned: hanging reviews whose caller aborted them. */
  abandoned = 0;
  /** decide, when set, answers SubjectAccessReviews instead of the allowed table. */
  decide: ((user: ReviewedUser, attrs: ResourceAttributes) => boolean) | null = null;
  /** audiencesAsked: the audiences of each TokenReview. */
  readonly audiencesAsked: (readonly string[])[] = [];

  allow(username: string, verb: string): this {
    this.allowed.add(`${username} ${verb}`);
    return this;
  }

  async reviewToken(token: string, audiences: readonly string[], signal?: AbortSignal): Promise<ReviewedUser | null> {
    this.tokenReviews++;
    this.audiencesAsked.push(audiences);
    if (this.hang) return this.#hang(signal);
    if (this.failing) throw new Error('connect ECONNREFUSED 10.0.0.1:6443');
    const user = this.users.get(token);
    if (!user) return null;
    const valid = (user.audiences ?? ['kproxy-dashboard']).filter((a) => audiences.includes(a));
    return valid.length ? { ...user, audiences: valid } : null;
  }

  async reviewAccess(user: ReviewedUser, attrs: ResourceAttributes, signal?: AbortSignal): Promise<{ allowed: boolean; reason: string }> {
    this.accessReviews++;
    if (this.hang) return this.#hang(signal);
    if (this.failing) throw new Error('connect ECONNREFUSED 10.0.0.1:6443');
    const ok = attrs.resource === 'nodes' && attrs.subresource === 'kproxy' && (this.decide ? this.decide(user, attrs) : this.allowed.has(`${user.username} ${attrs.verb}`));
    return { allowed: ok, reason: ok ? 'allowed by test' : '' };
  }

  #hang(signal: AbortSignal | undefined): Promise<never> {
    return new Promise((_resolve, reject) =>
      signal?.addEventListener('abort', () => {
        this.abandoned++;
        reject(new Error('aborted'));
      }),
    );
  }
}
