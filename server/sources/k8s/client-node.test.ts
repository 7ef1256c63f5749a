import { readFileSync } from 'node:fs';
import { registerHooks } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadClientNode } from './client-node.ts';

const SERVER = resolve(import.meta.dirname, '..', '..');

/** staticImports lists the modules a file imports for their values (import type and import() left out). */
function staticImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/^(?:import|export)\s+(?!type\b)[^;]*?\bfrom\s+'([^']+)'/gms)) out.push(m[1]);
  for (const m of text.matchAll(/^import\s+'([^']+)'/gm)) out.push(m[1]);
  return out;
}

describe('the Kubernetes client', () => {
  it('is not loaded with the daemon: no module of its static import graph imports it (only client-node.ts, on first use)', () => {
    const seen = new Set<string>();
    const packages = new Map<string, string>();
    const walk = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      for (const spec of staticImports(file)) {
        if (spec.startsWith('.')) walk(resolve(dirname(file), spec));
        else packages.set(spec, file);
      }
    };
    walk(join(SERVER, 'cli.ts'));
    walk(join(SERVER, 'command.ts'));
    expect(seen.has(join(SERVER, 'sources', 'k8s', 'kube-source.ts'))).toBe(true);
    expect([...packages.keys()].filter((p) => p.startsWith('@kubernetes/') || p === 'undici')).toEqual([]);
  });

  it('loads without the generated APIs and models (nor the serializer, which loads every model), and its KubeConfig still authenticates requests', async () => {
    const loaded: string[] = [];
    const spy = registerHooks({
      load(url, context, next) {
        loaded.push(url);
        return next(url, context);
      },
    });
    let client;
    try {
      client = await loadClientNode();
    } finally {
      spy.deregister();
    }
    const gen = loaded.filter((u) => u.includes('/@kubernetes/client-node/dist/gen/'));
    expect(gen.some((u) => u.endsWith('/gen/configuration.js'))).toBe(true);
    expect(gen.filter((u) => /\/gen\/(index\.js|apis\/|types\/|models\/)/.test(u))).toEqual([]);
    expect(loaded.filter((u) => u.endsWith('/@kubernetes/client-node/dist/serializer.js'))).toEqual([]);
    const kc = new client.KubeConfig();
    kc.loadFromString(
      'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]\nusers: [{name: u, user: {token: abc}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n',
    );
    const ctx = new client.RequestContext('https://10.0.0.1:6443/api/v1/services', client.HttpMethod.GET);
    await kc.applySecurityAuthentication(ctx);
    expect(ctx.getHeaders()).toMatchObject({ Authorization: 'Bearer abc' });
  });

  it('gives ListWatch a serializer that passes its selectors as they are, and refuses anything else', async () => {
    const { ObjectSerializer } = await import('./list-watch-serializer.ts');
    expect(ObjectSerializer.serialize('!service.kubernetes.io/headless', 'string')).toBe('!service.kubernetes.io/headless');
    expect(ObjectSerializer.serialize(undefined, 'string')).toBeUndefined();
    expect(() => ObjectSerializer.serialize({ kind: 'Service' }, 'V1Service')).toThrow(TypeError);
  });
});
