import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Service } from '../../server/proxy/kube-objects.ts';
import { waitFor } from '../wait.ts';
import { Cluster, node, NODE, service, slice } from './harness.ts';
import { FAKE_TOKEN } from './kubeconfig-file.ts';

const HEADLESS = { 'service.kubernetes.io/headless': '' };
const OTHER_PROXY = { 'service.kubernetes.io/service-proxy-name': 'other-proxy' };

let c: Cluster;
beforeEach(async () => {
  c = await new Cluster().start();
});
afterEach(async () => {
  await c.stop();
});

/** serviceKeys: the service ports the trackers hold after applying pending changes. */
function serviceKeys(): string[] {
  c.state.checkout();
  return [...c.state.services.keys()].sort();
}

function endpointIPs(): string[] {
  c.state.checkout();
  return [...c.state.endpoints.values()].flatMap((eps) => eps.map((e) => e.ip)).sort();
}

describe('KubeSource against a fake API server, through the real client-node informers', () => {
  it('delivers the initial lists to the trackers and reports each kind synced', async () => {
    c.server.apply(service('web'));
    c.server.apply(service('api', { clusterIP: '10.96.0.11', port: 81 }));
    c.server.apply(slice('web-abc', 'web', ['10.244.0.5', '10.244.0.6']));
    c.server.apply(node(NODE, 'zone-a'));
    c.server.apply(node('node-b', 'zone-b'));

    await c.connectAndSync();

    expect([...c.synced].sort()).toEqual(['EndpointSlice', 'Node', 'Service']);
    expect(c.state.ready).toBe(true);
    expect(serviceKeys()).toEqual(['shop/api:http/TCP', 'shop/web:http/TCP']);
    expect(endpointIPs()).toEqual(['10.244.0.5', '10.244.0.6']);
    // Only this node's Node is watched.
    expect(c.changes.filter((x) => x.kind === 'Node').map((x) => x.key)).toEqual([NODE]);
    expect(c.state.node).toMatchObject({ name: NODE, known: true, zone: 'zone-a' });
    expect(c.source.status()).toMatchObject({ kind: 'kubernetes', description: c.server.url, synced: true, objects: 4 });
    expect(c.counter('lists')).toBe(3);
    expect(c.counter('relists')).toBe(0);
    // Each informer lists once, then watches from the list's resourceVersion, with bookmarks, using the kubeconfig's token.
    await waitFor(() => c.counter('connects') === 3, { what: 'three watches' });
    const watch = c.server.watchRequests('services')[0];
    expect(watch.query).toMatchObject({ resourceVersion: String(c.server.store.resourceVersion), allowWatchBookmarks: 'true' });
    // The selectors reach the watch through client-node's ListWatch (and kproxy's stand-in for its serializer).
    expect(watch.query).toMatchObject({ labelSelector: '!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless', fieldSelector: 'spec.clusterIP!=None' });
    expect(Number(watch.query.timeoutSeconds)).toBeGreaterThanOrEqual(300);
    expect(watch.authorization).toBe(`Bearer ${FAKE_TOKEN}`);
  });

  it('lists page by page (500 objects a page, as client-go) and keeps only the fields kproxy reads', async () => {
    for (let i = 0; i < 1200; i++) {
      const s = service(`svc-${i}`, { clusterIP: `10.96.${Math.floor(i / 250)}.${(i % 250) + 1}` }) as Service;
      c.server.apply({ ...s, spec: { ...s.spec, selector: { app: `svc-${i}` } } });
    }
    c.server.apply(node(NODE, 'zone-a'));
    await c.connectAndSync();
    expect(serviceKeys()).toHaveLength(1200);
    const lists = c.server.listRequests('services');
    expect(lists.map((r) => [r.query.limit, r.query.continue === undefined])).toEqual([
      ['500', true],
      ['500', false],
      ['500', false],
    ]);
    // What the informer delivers (and its caches hold) is the kept part: no selector, no targetPort, no server-set timestamps.
    const held = c.changes.find((x) => x.kind === 'Service')!.cur as Service;
    expect(held.spec).not.toHaveProperty('selector');
    expect(held.spec!.ports![0]).not.toHaveProperty('targetPort');
    expect(held.metadata).not.toHaveProperty('creationTimestamp');
    expect(held.metadata!.uid).toEqual(expect.any(String));
  });

  it('lists again in one request when a continue token expired between pages', async () => {
    for (let i = 0; i < 700; i++) c.server.apply(service(`svc-${i}`, { clusterIP: `10.96.${Math.floor(i / 250)}.${(i % 250) + 1}` }));
    c.server.apply(node(NODE, 'zone-a'));
    c.server.expireNextContinue();
    await c.connectAndSync();
    expect(serviceKeys()).toHaveLength(700);
    expect(c.server.listRequests('services').map((r) => [r.query.limit, r.query.continue === undefined])).toEqual([
      ['500', true],
      ['500', false],
      [undefined, true],
    ]);
  });

  it('asks the server for exactly kube-proxy selectors, so headless and other-proxy objects never arrive', async () => {
    c.server.apply(service('web'));
    c.server.apply(service('headless', { clusterIP: 'None', labels: HEADLESS }));
    c.server.apply(service('no-cluster-ip', { clusterIP: 'None' }));
    c.server.apply(service('other', { clusterIP: '10.96.0.12', labels: OTHER_PROXY }));
    c.server.apply(slice('web-abc', 'web', ['10.244.0.5']));
    c.server.apply(slice('headless-abc', 'headless', ['10.244.0.7'], { labels: HEADLESS }));
    c.server.apply(slice('other-abc', 'other', ['10.244.0.8'], { labels: OTHER_PROXY }));
    c.server.apply(node('node-b'));

    await c.connectAndSync();

    const labelSelector = '!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless';
    expect(c.server.listRequests('services')[0].query).toMatchObject({ labelSelector, fieldSelector: 'spec.clusterIP!=None' });
    expect(c.server.listRequests('endpointslices')[0].query).toMatchObject({ labelSelector });
    expect(c.server.listRequests('nodes')[0].query).toMatchObject({ fieldSelector: `metadata.name=${NODE}` });
    expect(c.changes.map((x) => `${x.kind} ${x.key}`).sort()).toEqual(['EndpointSlice shop/web-abc', 'Service shop/web']);
    expect(c.synced.length).toBe(3); // an absent Node still completes its list

    // The watch filters too: a Service that joins another proxy leaves kproxy's view (the server sends DELETED).
    const mark = c.mark();
    c.server.apply(service('web', { labels: OTHER_PROXY }));
    c.server.apply(service('headless-2', { clusterIP: 'None', labels: HEADLESS }));
    await waitFor(() => c.changes.length > mark, { what: 'the relabel' });
    expect(c.changesSince(mark)).toEqual([expect.stringMatching(/^delete Service shop\/web /)]);
    expect(serviceKeys()).toEqual([]);
  });

  it('delivers adds, updates (with the previous object) and deletes to the trackers', async () => {
    c.server.apply(service('web'));
    c.server.apply(slice('web-abc', 'web', ['10.244.0.5']));
    await c.connectAndSync();

    let mark = c.mark();
    c.server.apply(service('api', { clusterIP: '10.96.0.11' }));
    await waitFor(() => serviceKeys().includes('shop/api:http/TCP'), { what: 'the add' });
    expect(c.changesSince(mark)).toEqual([expect.stringMatching(/^add Service shop\/api -->\d+$/)]);

    mark = c.mark();
    c.server.apply(service('web', { port: 8443 }));
    c.server.apply(slice('web-abc', 'web', ['10.244.0.5', '10.244.0.9']));
    await waitFor(() => endpointIPs().includes('10.244.0.9'), { what: 'the endpoint update' });
    const update = c.changes.slice(mark).find((x) => x.kind === 'Service')!;
    expect(update.op).toBe('update');
    expect((update.prev as Service).spec!.ports![0].port).toBe(80);
    expect((update.cur as Service).spec!.ports![0].port).toBe(8443);
    expect(c.state.services.get('shop/web:http/TCP')?.port).toBe(8443);

    mark = c.mark();
    const lastKnown = c.changes.filter((x) => x.key === 'shop/api').at(-1)!.cur;
    c.server.remove('Service', 'api', 'shop');
    await waitFor(() => !serviceKeys().includes('shop/api:http/TCP'), { what: 'the delete' });
    const del = c.changes.slice(mark);
    expect(del.map((x) => x.op)).toEqual(['delete']);
    expect(del[0].prev).toBe(lastKnown); // the last object the handlers were given
    expect(c.source.status().counters).toMatchObject({ adds: 3, updates: 2, deletes: 1, relists: 0 });
  });

  it('resumes a gracefully ended watch from its resourceVersion without losing the change made meanwhile', async () => {
    c.server.apply(service('web'));
    await c.connectAndSync();
    await waitFor(() => c.server.openWatches('services') === 1, { what: 'the services watch' });
    const rvBefore = String(c.server.store.resourceVersion);

    const mark = c.mark();
    c.server.dropWatches();
    c.server.apply(service('web', { port: 9090 })); // made while no watch is open

    await waitFor(() => c.changes.length > mark, { what: 'the change after reconnecting' });
    expect(c.changesSince(mark)).toEqual([expect.stringMatching(/^update Service shop\/web /)]);
    expect(c.server.watchRequests('services').at(-1)!.query.resourceVersion).toBe(rvBefore);
    expect(c.counter('Service.lists')).toBe(1);
  });

  it('restarts after a reset connection with backoff on the injected clock, resuming without a relist', async () => {
    c.server.apply(service('web'));
    await c.connectAndSync();
    await waitFor(() => c.server.openWatches() === 3, { what: 'three watches' });

    const mark = c.mark();
    c.server.dropWatches({ abrupt: true });
    c.server.apply(service('api', { clusterIP: '10.96.0.11' }));
    await waitFor(() => c.counter('errors') === 3, { what: 'the three informers to see the reset' });
    expect(c.log.lines('warn').join('\n')).toMatch(/Services: watch failed, retrying in \d+\.\ds/);

    // Nothing reconnects until the backoff delay passes on the fake clock.
    expect(c.server.openWatches()).toBe(0);
    await c.clock.advanceAsync(30_000);
    await waitFor(() => c.changes.length > mark, { what: 'the change made during the outage' });
    expect(c.changesSince(mark)).toEqual([expect.stringMatching(/^add Service shop\/api /)]);
    expect(c.counter('restarts')).toBe(3);
    expect(c.counter('lists')).toBe(3); // resumed from the resourceVersion, no relist
  });

  it('relists after 410 Gone and delivers exactly the adds, updates and deletes made during the gap', async () => {
    c.server.apply(service('stable'));
    c.server.apply(service('old', { clusterIP: '10.96.0.11' }));
    c.server.apply(service('changing', { clusterIP: '10.96.0.12' }));
    await c.connectAndSync();
    await waitFor(() => c.server.openWatches('services') === 1, { what: 'the services watch' });

    const mark = c.mark();
    c.server.dropWatches();
    c.server.remove('Service', 'old', 'shop');
    c.server.apply(service('new', { clusterIP: '10.96.0.13' }));
    c.server.apply(service('changing', { clusterIP: '10.96.0.12', port: 8080 }));
    c.server.compact(); // the resume point is gone: the watch answers ERROR 410

    await waitFor(() => c.changes.length - mark >= 3, { what: 'the relist differences' });
    expect(
      c
        .changesSince(mark)
        .map((s) => s.split(' ').slice(0, 3).join(' '))
        .sort(),
    ).toEqual(['add Service shop/new', 'delete Service shop/old', 'update Service shop/changing']);
    expect(c.counter('Service.expired')).toBe(1);
    expect(c.counter('Service.relists')).toBe(1);
    expect(serviceKeys()).toEqual(['shop/changing:http/TCP', 'shop/new:http/TCP', 'shop/stable:http/TCP']);

    // After the relist the watch resumes from the new list (client-node waits its reconnect delay on our clock).
    await c.clock.advanceAsync(5_000);
    await waitFor(() => c.server.openWatches('services') === 1, { what: 'the watch after the relist' });
    const m2 = c.mark();
    c.server.apply(service('later', { clusterIP: '10.96.0.14' }));
    await waitFor(() => c.changes.length > m2, { what: 'a change after the relist' });
    expect(c.changesSince(m2)).toEqual([expect.stringMatching(/^add Service shop\/later /)]);
  });

  it('relists a watch that went quiet, and counts a BOOKMARK as a sign of life', async () => {
    const quiet = 60_000;
    c.server.apply(service('web'));
    c.server.apply(service('gone', { clusterIP: '10.96.0.11' }));
    await c.connectAndSync({ quietRelistMs: quiet });
    await waitFor(() => c.server.openWatches() === 3, { what: 'three watches' });

    await c.clock.advanceAsync(quiet * 0.75);
    expect(c.server.bookmark()).toBe(3);
    await waitFor(() => c.counter('bookmarks') === 3, { what: 'the bookmarks' });
    await c.clock.advanceAsync(quiet * 0.75); // quiet for 1.5x the limit since the list, but not since the bookmark
    expect(c.counter('relists')).toBe(0);

    // A hung watch: the server keeps it open but sends nothing, while objects change.
    c.server.stallWatches(true);
    const mark = c.mark();
    c.server.apply(service('web', { port: 8081 }));
    c.server.remove('Service', 'gone', 'shop');
    await c.clock.advanceAsync(quiet);
    await waitFor(() => c.counter('Service.quietRelists') === 1 && c.changes.length - mark >= 2, { what: 'the quiet relist' });
    expect(
      c
        .changesSince(mark)
        .map((s) => s.split(' ').slice(0, 3).join(' '))
        .sort(),
    ).toEqual(['delete Service shop/gone', 'update Service shop/web']);
    expect(c.counter('quietRelists')).toBe(3);
    expect(c.log.lines('warn').join('\n')).toMatch(/Services watch delivered nothing \(no events, no bookmarks\) for \d+s, relisting/);
    // A relist of unchanged objects changes nothing.
    expect(c.changes.slice(mark).filter((x) => x.kind !== 'Service')).toEqual([]);
  });

  it('keeps retrying while the API is down at start, then syncs when it comes back', async () => {
    c.server.apply(service('web'));
    c.server.apply(slice('web-abc', 'web', ['10.244.0.5']));
    await c.server.goDown();

    await c.connect();
    await waitFor(() => c.counter('errors') >= 3, { what: 'the first failures' });
    for (let i = 0; i < 3; i++) {
      const before = c.counter('errors');
      await c.clock.advanceAsync(30_000);
      await waitFor(() => c.counter('errors') >= before + 3, { what: 'the retries to fail again' });
    }
    expect(c.synced).toEqual([]);
    expect(c.state.ready).toBe(false);
    expect(c.source.status()).toMatchObject({ synced: false, objects: 0, lastError: expect.stringMatching(/listing \w+ from http:\/\/127\.0\.0\.1:\d+ failed .*ECONNREFUSED/) });
    // One clear line per failed attempt, with delays that grow (jittered) up to the cap.
    const lines = c.log.lines('warn').filter((l) => l.includes('Services: cannot list yet, retrying in'));
    expect(lines.length).toBe(c.counter('Service.errors'));
    expect(lines.length).toBeGreaterThanOrEqual(4);
    const delays = lines.map((l) => Number(/retrying in ([\d.]+)s/.exec(l)![1]));
    expect(delays.slice(0, 4)).toEqual([0.6, 1.2, 2.4, 4.8]); // 800ms doubling, random() = 0.5 takes a quarter off
    expect(Math.max(...delays)).toBeLessThanOrEqual(30);
    expect(lines[0]).toMatch(/error=.*ECONNREFUSED/);

    await c.server.comeBack();
    await c.clock.advanceAsync(30_000);
    await waitFor(() => c.state.ready, { what: 'the lists after recovery' });
    expect(serviceKeys()).toEqual(['shop/web:http/TCP']);
    expect(endpointIPs()).toEqual(['10.244.0.5']);
    await waitFor(() => c.log.lines('info').some((l) => /Services watch connected again .*failedAttempts=\d+ lastError=.*ECONNREFUSED/.test(l)), { what: 'the recovery log line' });
    await waitFor(() => c.source.status().lastError === undefined, { what: 'every informer to watch again' });
  });

  it('stops cleanly: no watch stays open and no timer is left behind on the clock', async () => {
    c.server.apply(service('web'));
    await c.connectAndSync({ quietRelistMs: 60_000 });
    await waitFor(() => c.server.openWatches() === 3, { what: 'three watches' });
    await c.source.stop();
    await waitFor(() => c.server.openWatches() === 0, { what: 'the watches to close' });
    expect(c.clock.pending).toBe(0);
  });
});
