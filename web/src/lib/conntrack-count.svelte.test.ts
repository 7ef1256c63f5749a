import { describe, expect, it } from 'vitest';
import { Api } from './api.ts';
import { ConntrackCount, conntrackPath } from './conntrack-count.svelte.ts';

describe('ConntrackCount', () => {
  it('builds the route from the service key, escaping each part', () => {
    expect(conntrackPath('kube-system/kube-dns')).toBe('services/kube-system/kube-dns/conntrack');
    expect(conntrackPath('a b/c?d')).toBe('services/a%20b/c%3Fd/conntrack');
  });

  it('runs one request at a time and says when the network failed', async () => {
    let release: (r: Response) => void = () => {};
    let calls = 0;
    const api = new Api(
      () => null,
      () => {
        calls++;
        return calls === 1 ? new Promise<Response>((r) => (release = r)) : Promise.reject(new Error('connection refused'));
      },
    );
    const c = new ConntrackCount(api, 'shop/web');
    const first = c.count();
    expect(c.counting).toBe(true);
    await c.count();
    expect(calls).toBe(1);
    release(new Response(JSON.stringify({ service: 'shop/web', simulated: false, notCounted: 0, frontends: [] }), { status: 200 }));
    await first;
    expect(c.counting).toBe(false);
    expect(c.result?.service).toBe('shop/web');
    await c.count();
    expect(c.error).toEqual({ code: 'NETWORK', message: 'kproxy did not answer: connection refused', rateLimited: false });
    expect(c.result?.service).toBe('shop/web');
  });
});
