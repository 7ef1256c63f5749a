import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeApiServer } from './fake-apiserver.ts';
import { parseFieldSelector, parseLabelSelector } from './selectors.ts';

/**
 * The fake API server is only worth its tests if it speaks the protocol the way
 * the real one does: these pin the parts kproxy's informer tests rely on.
 */
let s: FakeApiServer;
beforeEach(async () => {
  s = await new FakeApiServer().start();
});
afterEach(async () => {
  await s.stop();
});

const svc = (name: string, labels: Record<string, string> = {}, clusterIP = '10.96.0.1') => ({ kind: 'Service', metadata: { name, namespace: 'ns', labels }, spec: { clusterIP } });

/** watchLines opens a watch, runs `during` once it is open, and collects lines until the server ends it. */
async function watchLines(query: string, during: () => void = () => {}): Promise<{ type: string; object: any }[]> {
  const res = await fetch(`${s.url}/api/v1/services?watch=true&${query}`);
  expect(res.status).toBe(200);
  during();
  s.dropWatches();
  const text = await res.text();
  return text.trim()
    ? text
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l))
    : [];
}

describe('FakeApiServer', () => {
  it('lists with one global resourceVersion and leaves kind off the items', async () => {
    s.apply(svc('a'));
    s.apply({ kind: 'Node', metadata: { name: 'n1' } });
    const list = await (await fetch(`${s.url}/api/v1/services`)).json();
    expect(list).toMatchObject({ kind: 'ServiceList', apiVersion: 'v1', metadata: { resourceVersion: '3' } });
    expect(list.items.map((i: any) => [i.metadata.name, i.metadata.resourceVersion, i.kind])).toEqual([['a', '2', undefined]]);
    const ns = await (await fetch(`${s.url}/api/v1/namespaces/other/services`)).json();
    expect(ns.items).toEqual([]);
  });

  it('filters by label and field selectors and refuses fields the resource does not index', async () => {
    s.apply(svc('plain'));
    s.apply(svc('headless', { 'service.kubernetes.io/headless': '' }, 'None'));
    s.apply(svc('other', { 'service.kubernetes.io/service-proxy-name': 'x' }));
    const q = new URLSearchParams({ labelSelector: '!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless', fieldSelector: 'spec.clusterIP!=None' });
    const list = await (await fetch(`${s.url}/api/v1/services?${q}`)).json();
    expect(list.items.map((i: any) => i.metadata.name)).toEqual(['plain']);
    const bad = await fetch(`${s.url}/api/v1/services?fieldSelector=spec.ports=80`);
    expect(bad.status).toBe(400);
    expect((await bad.json()).message).toBe('field label not supported: spec.ports');
  });

  it('replays history after the resourceVersion, then streams changes, as selector transitions', async () => {
    s.apply(svc('a'));
    const from = s.store.resourceVersion;
    s.apply(svc('b'));
    const lines = await watchLines(`resourceVersion=${from}&labelSelector=!x`, () => {
      s.apply(svc('a', { x: '1' })); // leaves the selector: DELETED
      s.remove('Service', 'b', 'ns');
    });
    expect(lines.map((l) => `${l.type} ${l.object.metadata.name} ${l.object.metadata.resourceVersion}`)).toEqual(['ADDED b 3', 'DELETED a 4', 'DELETED b 5']);
  });

  it('starts a watch without resourceVersion with the current objects, and sends BOOKMARKs only when allowed', async () => {
    s.apply(svc('a'));
    const plain = await watchLines('', () => s.bookmark());
    expect(plain.map((l) => l.type)).toEqual(['ADDED']);
    const withBookmarks = await watchLines('allowWatchBookmarks=true', () => s.bookmark());
    expect(withBookmarks.map((l) => l.type)).toEqual(['ADDED', 'BOOKMARK']);
    expect(withBookmarks[1].object).toEqual({ kind: 'Service', apiVersion: 'v1', metadata: { resourceVersion: '2' } });
  });

  it('answers a watch from a compacted resourceVersion with one ERROR 410 and ends it', async () => {
    s.apply(svc('a'));
    s.apply(svc('a', { v: '2' }));
    s.compact();
    const text = await (await fetch(`${s.url}/api/v1/services?watch=true&resourceVersion=2`)).text();
    expect(JSON.parse(text)).toMatchObject({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired' } });
    const ok = await fetch(`${s.url}/api/v1/services?watch=true&resourceVersion=${s.store.resourceVersion}`);
    expect(ok.status).toBe(200);
    void ok.body?.cancel();
  });

  it('refuses connections while down and serves the same port again after coming back', async () => {
    const url = s.url;
    await s.goDown();
    await expect(fetch(`${url}/api/v1/nodes`)).rejects.toThrow();
    await s.comeBack();
    expect(s.url).toBe(url);
    expect((await fetch(`${url}/api/v1/nodes`)).status).toBe(200);
  });

  it('validates events.k8s.io/v1 Events like the API server and applies series patches', async () => {
    const post = (body: unknown) => fetch(`${s.url}/apis/events.k8s.io/v1/namespaces/default/events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const ev = {
      metadata: { name: 'n.1' },
      eventTime: '2026-01-01T00:00:00.000000Z',
      reportingController: 'kproxy',
      reportingInstance: 'n',
      action: 'A',
      reason: 'R',
      type: 'Normal',
      regarding: { kind: 'Node', name: 'n' },
    };
    expect((await post({ ...ev, eventTime: '2026-01-01T00:00:00.000Z' })).status).toBe(422);
    expect((await post(ev)).status).toBe(201);
    expect((await post(ev)).status).toBe(409);
    const patch = (type: string) =>
      fetch(`${s.url}/apis/events.k8s.io/v1/namespaces/default/events/n.1`, {
        method: 'PATCH',
        headers: { 'content-type': type },
        body: JSON.stringify({ series: { count: 2, lastObservedTime: ev.eventTime } }),
      });
    expect((await patch('application/json-patch+json')).status).toBe(415);
    expect((await patch('application/strategic-merge-patch+json')).status).toBe(200);
    expect(s.events[0]).toMatchObject({ patches: 1, object: { reason: 'R', series: { count: 2 } } });
  });
});

describe('selectors', () => {
  const o = (labels: Record<string, string>, clusterIP = '10.0.0.1') => ({ metadata: { name: 'x', labels }, spec: { clusterIP } });
  it('parse label requirements as the API server does', () => {
    const m = parseLabelSelector('app=web,tier!=db,!legacy,env in (prod, staging),zone notin (z9),canary');
    expect(m(o({ app: 'web', env: 'prod', canary: '' }))).toBe(true);
    expect(m(o({ app: 'web', env: 'prod', canary: '', legacy: 'y' }))).toBe(false);
    expect(m(o({ app: 'web', env: 'dev', canary: '' }))).toBe(false);
    expect(m(o({ app: 'web', env: 'prod' }))).toBe(false);
    expect(() => parseLabelSelector('a=b=c')).toThrow(/unable to parse requirement/);
  });
  it('parse field requirements over supported fields', () => {
    const m = parseFieldSelector('spec.clusterIP!=None,metadata.name=x', ['spec.clusterIP', 'metadata.name']);
    expect(m(o({}))).toBe(true);
    expect(m(o({}, 'None'))).toBe(false);
  });
});
