import type { AccessReviewer, ResourceAttributes, ReviewedUser } from './access-review.ts';

/**
 * FakeAccessReviewer answers reviews from tables: tokens -> users, and the
 * "user verb" pairs that are allowed. It counts calls, so tests can check caching.
 */
export class FakeAccessReviewer implements AccessReviewer {
  readonly users = new Map<string, ReviewedUser>();
  readonly allowed = new Set<string>();
  tokenReviews = 0;
  accessReviews = 0;
  /** failing: every review rejects (API server unreachable). */
  failing = false;

  allow(username: string, verb: string): this {
    this.allowed.add(`${username} ${verb}`);
    return this;
  }

  async reviewToken(token: string): Promise<ReviewedUser | null> {
    this.tokenReviews++;
    if (this.failing) throw new Error('connect ECONNREFUSED 10.0.0.1:6443');
    return this.users.get(token) ?? null;
  }

  async reviewAccess(user: ReviewedUser, attrs: ResourceAttributes): Promise<{ allowed: boolean; reason: string }> {
    this.accessReviews++;
    if (this.failing) throw new Error('connect ECONNREFUSED 10.0.0.1:6443');
    const ok = attrs.resource === 'nodes' && attrs.subresource === 'kproxy' && this.allowed.has(`${user.username} ${attrs.verb}`);
    return { allowed: ok, reason: ok ? 'allowed by test' : '' };
  }
}
