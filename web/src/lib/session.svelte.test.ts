import { describe, expect, it } from 'vitest';
import { Session, TOKEN_KEY } from './session.svelte.ts';

class MemoryStorage {
  m = new Map<string, string>();
  getItem(k: string) {
    return this.m.get(k) ?? null;
  }
  setItem(k: string, v: string) {
    this.m.set(k, v);
  }
  removeItem(k: string) {
    this.m.delete(k);
  }
}

/** server answers /whoami: 200 for the right token (or for anyone when auth is off), 401 otherwise. */
function server(token: string | null) {
  const seen: (string | null)[] = [];
  const fetchFn = async (_url: string, init?: RequestInit) => {
    const auth = (init?.headers as Record<string, string> | undefined)?.authorization ?? null;
    seen.push(auth);
    if (token === null || auth === `Bearer ${token}`) return new Response(JSON.stringify({ authMode: token ? 'token' : 'off', user: token ? 'token' : 'anonymous', canAct: true }), { status: 200 });
    return new Response(JSON.stringify({ error: { code: 'KPROXY_ERR_AUTH_FAILED', message: 'the bearer token is not the dashboard token' } }), { status: 401 });
  };
  return { fetchFn, seen };
}

describe('Session', () => {
  it('needs no login when the server has auth off', async () => {
    const s = new Session(new MemoryStorage(), server(null).fetchFn);
    await s.check();
    expect(s.status).toBe('ready');
    expect(s.viewer?.authMode).toBe('off');
  });

  it('asks for a token, keeps it only once the server accepts it, and sends it as a bearer header', async () => {
    const storage = new MemoryStorage();
    const srv = server('s3cret');
    const s = new Session(storage, srv.fetchFn);
    await s.check();
    expect(s.status).toBe('login');
    expect(await s.login('wrong')).toBe(false);
    expect(s.error).toBe('the bearer token is not the dashboard token');
    expect(storage.getItem(TOKEN_KEY)).toBeNull();
    expect(await s.login(' s3cret ')).toBe(true);
    expect(s.status).toBe('ready');
    expect(storage.getItem(TOKEN_KEY)).toBe('s3cret');
    expect(srv.seen.at(-1)).toBe('Bearer s3cret');
  });

  it('forgets a stored token the server no longer accepts, and signs out', async () => {
    const storage = new MemoryStorage();
    storage.setItem(TOKEN_KEY, 'old');
    const s = new Session(storage, server('new').fetchFn);
    await s.check();
    expect(s.status).toBe('login');
    expect(storage.getItem(TOKEN_KEY)).toBeNull();
    await s.login('new');
    s.logout();
    expect(s.status).toBe('login');
    expect(storage.getItem(TOKEN_KEY)).toBeNull();
  });

  it('tells an unreachable server apart from a refused token', async () => {
    const s = new Session(null, async () => {
      throw new TypeError('Failed to fetch');
    });
    await s.check();
    expect(s.status).toBe('error');
    expect(s.error).toMatch(/did not answer: Failed to fetch/);
  });
});
