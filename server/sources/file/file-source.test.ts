import { mkdir, mkdtemp, rm, symlink, unlink, writeFile, rename } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../../test/wait.ts';
import { realClock } from '../../clock.ts';
import { MemoryLog } from '../../log.ts';
import type { ChangeHandlers, ObjectKind } from '../../proxy/proxy-state.ts';
import { FileSource } from './file-source.ts';

class Recorder implements ChangeHandlers {
  events: string[] = [];
  synced: ObjectKind[] = [];
  onService(prev: { metadata?: { name?: string; resourceVersion?: string } } | null, cur: typeof prev) {
    this.events.push(
      `${prev && cur ? 'update' : cur ? 'add' : 'delete'} Service ${(cur ?? prev)!.metadata!.name}${prev && cur ? ` (was port ${JSON.stringify((prev as never as { spec: { ports: { port: number }[] } }).spec.ports[0].port)})` : ''}`,
    );
  }
  onEndpointSlice(prev: { metadata?: { name?: string } } | null, cur: typeof prev) {
    this.events.push(`${prev && cur ? 'update' : cur ? 'add' : 'delete'} EndpointSlice ${(cur ?? prev)!.metadata!.name}`);
  }
  onNode(prev: { metadata?: { name?: string } } | null, cur: typeof prev) {
    this.events.push(`${prev && cur ? 'update' : cur ? 'add' : 'delete'} Node ${(cur ?? prev)!.metadata!.name}`);
  }
  onSynced(kind: ObjectKind) {
    this.synced.push(kind);
  }
}

const svc = (name: string, port = 80, extra = '') => `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: ns${extra} }
spec: { clusterIP: 10.96.0.1, ports: [{ name: http, port: ${port} }] }
`;

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kproxy-files-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function source(path: string, log = new MemoryLog(), watch = false) {
  return new FileSource({ path, nodeName: 'node-a', clock: realClock, logger: log.logger, watch, debounceMs: 20 });
}

describe('FileSource', () => {
  it('delivers the initial objects as adds, then reports every kind synced', async () => {
    await writeFile(join(dir, 'a.yaml'), `${svc('web')}---\n${svc('api', 81)}`);
    await writeFile(
      join(dir, 'nodes.json'),
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'List',
        items: [
          { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-a' } },
          { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-b' } },
        ],
      }),
    );
    await writeFile(join(dir, 'notes.txt'), 'not a manifest');
    const r = new Recorder();
    const s = source(dir);
    await s.start(r);
    expect(r.events).toEqual(['add Service web', 'add Service api', 'add Node node-a']);
    expect(r.synced).toEqual(['Service', 'EndpointSlice', 'Node']);
    expect(s.status()).toMatchObject({ kind: 'file', synced: true, objects: 3 });
  });

  it('applies the informer selectors: headless and other-proxy services never arrive', async () => {
    await writeFile(
      join(dir, 'a.yaml'),
      `${svc('web')}---\n${svc('mesh', 80, ', labels: { service.kubernetes.io/service-proxy-name: mesh }')}---\n` +
        `apiVersion: v1\nkind: Service\nmetadata: { name: db, namespace: ns }\nspec: { clusterIP: None, ports: [{ port: 5432 }] }\n`,
    );
    const r = new Recorder();
    await source(dir).start(r);
    expect(r.events).toEqual(['add Service web']);
  });

  it('delivers ServiceCIDRs (networking.k8s.io/v1, cluster-scoped) to the handler that takes them', async () => {
    const file = join(dir, 'cidrs.yaml');
    const cidr = (name: string, c: string) => `apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: { name: ${name} }\nspec: { cidrs: [${c}] }\n`;
    await writeFile(file, `${cidr('kubernetes', '10.96.0.0/16')}---\n${cidr('extra', '10.97.0.0/16')}`);
    const r = new Recorder();
    const seen: string[] = [];
    const h = Object.assign(r, {
      onServiceCIDR: (prev: { metadata?: { name?: string; namespace?: string } } | null, cur: typeof prev) =>
        seen.push(`${prev && cur ? 'update' : cur ? 'add' : 'delete'} ${(cur ?? prev)!.metadata!.name}${(cur ?? prev)!.metadata!.namespace ? ' (namespaced!)' : ''}`),
    });
    const s = source(dir);
    await s.start(h);
    expect(seen).toEqual(['add kubernetes', 'add extra']);
    await writeFile(file, cidr('kubernetes', '10.96.0.0/15'));
    await s.reloadNow();
    expect(seen.slice(2)).toEqual(['delete extra', 'update kubernetes']);
    // A source handler without onServiceCIDR (the iptables and IPVS modes need none) is fine too.
    await source(dir).start(new Recorder());
  });

  it('turns an edit into update, add and delete events with the previous object', async () => {
    const file = join(dir, 'a.yaml');
    await writeFile(file, `${svc('web')}---\n${svc('api')}`);
    const r = new Recorder();
    const s = source(dir);
    await s.start(r);
    r.events = [];
    await writeFile(file, `${svc('web', 8080)}---\n${svc('cart')}`);
    await s.reloadNow();
    expect(r.events).toEqual(['delete Service api', 'update Service web (was port 80)', 'add Service cart']);
    // Unchanged content is no event at all.
    r.events = [];
    await writeFile(file, `${svc('web', 8080)}---\n${svc('cart')}`);
    await s.reloadNow();
    expect(r.events).toEqual([]);
  });

  it('keeps the last good state of a file with broken YAML and says where the error is', async () => {
    const file = join(dir, 'a.yaml');
    await writeFile(file, svc('web'));
    const log = new MemoryLog();
    const r = new Recorder();
    const s = source(dir, log);
    await s.start(r);
    await writeFile(file, `${svc('web', 9090)}metadata: [unclosed\n  - {`);
    await s.reloadNow();
    expect(r.events).toEqual(['add Service web']);
    expect(s.status().lastError).toMatch(/a\.yaml:\d+:\d+: invalid YAML/);
    expect(log.lines('error').join('\n')).toMatch(/a\.yaml:\d+:\d+: invalid YAML.*keeping the last good state of a\.yaml/);
    await writeFile(file, svc('web', 9090));
    await s.reloadNow();
    expect(r.events).toEqual(['add Service web', 'update Service web (was port 80)']);
    expect(s.status().lastError).toBeUndefined();
  });

  it('does not delete everything while a file is briefly empty; deleting the file does', async () => {
    const file = join(dir, 'a.yaml');
    await writeFile(file, `${svc('web')}---\n${svc('api')}`);
    const log = new MemoryLog();
    const r = new Recorder();
    const s = source(dir, log);
    await s.start(r);
    await writeFile(file, '');
    await s.reloadNow();
    expect(r.events).toEqual(['add Service web', 'add Service api']);
    expect(log.lines('warn').join('\n')).toMatch(/manifest file is empty, keeping its last good objects/);
    await unlink(file);
    await s.reloadNow();
    expect(r.events.slice(2).sort()).toEqual(['delete Service api', 'delete Service web']);
  });

  it('follows a single file replaced by rename (how editors save), debounced', async () => {
    const file = join(dir, 'cluster.yaml');
    await writeFile(file, svc('web'));
    const r = new Recorder();
    const s = source(file, new MemoryLog(), true);
    await s.start(r);
    try {
      await writeFile(join(dir, '.cluster.yaml.swp'), svc('web', 81));
      await rename(join(dir, '.cluster.yaml.swp'), file);
      await waitFor(() => r.events.length === 2, { what: 'the edit to arrive' });
      expect(r.events).toEqual(['add Service web', 'update Service web (was port 80)']);
    } finally {
      await s.stop();
    }
  });

  it('reads a file that keeps changing faster than the debounce within maxWaitMs, not only at the poll', async () => {
    const file = join(dir, 'busy.yaml');
    await writeFile(file, svc('web', 1000));
    const r = new Recorder();
    const ports: number[] = [];
    const onService = r.onService.bind(r);
    r.onService = (prev, cur) => {
      onService(prev, cur);
      if (cur) ports.push((cur as never as { spec: { ports: { port: number }[] } }).spec.ports[0].port);
    };
    const s = new FileSource({ path: dir, nodeName: 'node-a', clock: realClock, logger: new MemoryLog().logger, debounceMs: 100, maxWaitMs: 200, pollMs: 60_000 });
    await s.start(r);
    try {
      // A write every 20 ms until three of them have been read (or 500 writes, 10 s and more): the debounce
      // alone (100 ms) would read nothing before the writes stop, however long they go on.
      let writes = 0;
      while (ports.length < 4 && writes < 500) {
        writes++;
        await writeFile(file, svc('web', 1000 + writes));
        await new Promise((done) => setTimeout(done, 20));
      }
      const readWhileWriting = ports.length - 1;
      expect(readWhileWriting).toBeGreaterThanOrEqual(3);
      // The last write is read once the writes stop.
      const last = 1000 + writes;
      await waitFor(() => ports.at(-1) === last, { what: 'the last write to arrive' });
    } finally {
      await s.stop();
    }
  });

  it('refuses a file over the size limit and keeps its last good state', async () => {
    const file = join(dir, 'a.yaml');
    await writeFile(file, svc('web'));
    const log = new MemoryLog();
    const r = new Recorder();
    const s = new FileSource({ path: dir, nodeName: 'node-a', clock: realClock, logger: log.logger, watch: false, maxFileBytes: 400 });
    await s.start(r);
    await writeFile(file, svc('web', 81) + '#'.repeat(500));
    await s.reloadNow();
    expect(r.events).toEqual(['add Service web']);
    expect(s.status().lastError).toMatch(/over the 400-byte limit/);
  });

  it('reads a ConfigMap volume, whose keys are symbolic links into ..data', async () => {
    // How the kubelet mounts a ConfigMap: ..data -> ..2026_01_01/, and each key a link through ..data.
    await mkdir(join(dir, '..2026_01_01'));
    await writeFile(join(dir, '..2026_01_01', 'services.yaml'), svc('web'));
    await symlink('..2026_01_01', join(dir, '..data'));
    await symlink('..data/services.yaml', join(dir, 'services.yaml'));
    const r = new Recorder();
    const s = source(dir);
    await s.start(r);
    expect(r.events).toEqual(['add Service web']);
    expect(s.status()).toMatchObject({ synced: true, objects: 1 });
  });
});

describe('FileSource at start: synced only once every file was read', () => {
  it('a file that fails to parse holds the sync back, names file:line and the error, and is counted', async () => {
    await writeFile(join(dir, 'good.yaml'), svc('web'));
    await writeFile(join(dir, 'bad.yaml'), '{ broken\n');
    const log = new MemoryLog();
    const r = new Recorder();
    const s = source(dir, log, true);
    await s.start(r);
    try {
      // The good file's objects are delivered (as an informer's list), but the source is not synced: nothing is programmed.
      expect(r.synced).toEqual([]);
      expect(s.status()).toMatchObject({ synced: false, counters: { parseErrors: 1 } });
      expect(s.status().waitingFor).toMatch(/bad\.yaml:\d+:\d+: invalid YAML/);
      expect(s.status().lastError).toMatch(/bad\.yaml:\d+:\d+: invalid YAML.*nothing is synced until it can be read/);
      expect(log.lines('error')).toHaveLength(1);
      // Fixed: synced, and the fixed file's objects arrive.
      await writeFile(join(dir, 'bad.yaml'), svc('api'));
      await s.reloadNow();
      expect(r.synced).toEqual(['Service', 'EndpointSlice', 'Node']);
      expect(r.events).toEqual(['add Service web', 'add Service api']);
      expect(s.status()).toMatchObject({ synced: true, objects: 2 });
      expect(s.status().waitingFor).toBeUndefined();
      expect(s.status().lastError).toBeUndefined();
    } finally {
      await s.stop();
    }
  });

  it('without watching (--once), an incomplete first read throws SourceNotSyncedError naming the file and delivers nothing as synced', async () => {
    await writeFile(join(dir, 'a.yaml'), '{ broken\n');
    const r = new Recorder();
    const err = await source(dir)
      .start(r)
      .then(
        () => null,
        (e: unknown) => e as Error & { code: string },
      );
    expect(err?.code).toBe('KPROXY_ERR_SOURCE_NOT_SYNCED');
    expect(err?.message).toMatch(/could not be read completely: .*a\.yaml:2:1: invalid YAML/);
    expect(r.synced).toEqual([]);
  });

  it('a path that is missing at start is the same case: it waits, and syncs when the path appears', async () => {
    const { FakeClock } = await import('../../clock-fake.ts');
    const clock = new FakeClock();
    const path = join(dir, 'later');
    const log = new MemoryLog();
    const r = new Recorder();
    const s = new FileSource({ path, nodeName: 'node-a', clock, logger: log.logger, pollMs: 5000 });
    await s.start(r);
    try {
      expect(s.status()).toMatchObject({ synced: false, waitingFor: expect.stringMatching(/later cannot be read: ENOENT/) });
      // The poll looks again; the same problem is not logged every time.
      await clock.advanceAsync(5000);
      await s.reloadNow();
      expect(log.lines('error')).toHaveLength(1);
      await mkdir(path);
      await writeFile(join(path, 'a.yaml'), svc('web'));
      await clock.advanceAsync(5000);
      await waitFor(() => r.synced.length === 3, { what: 'the source to sync' });
      expect(r.events).toEqual(['add Service web']);
      expect(s.status().lastError).toBeUndefined();
    } finally {
      await s.stop();
    }
  });

  it('an unreadable file (a link whose target is missing) holds the sync back', async () => {
    await writeFile(join(dir, 'a.yaml'), svc('web'));
    await symlink('gone.yaml', join(dir, 'b.yaml'));
    const err = await source(dir)
      .start(new Recorder())
      .then(
        () => null,
        (e: unknown) => e as Error,
      );
    expect(err?.message).toMatch(/b\.yaml cannot be read: ENOENT/);
  });

  it('an empty file is never read as "no objects" at start; "# nothing" is a legal empty file', async () => {
    await writeFile(join(dir, 'a.yaml'), '');
    const err = await source(dir)
      .start(new Recorder())
      .then(
        () => null,
        (e: unknown) => e as Error,
      );
    expect(err?.message).toMatch(/a\.yaml is empty .*"# nothing"/);
    await writeFile(join(dir, 'a.yaml'), '# nothing\n');
    const s = source(dir);
    await s.start(new Recorder());
    expect(s.status()).toMatchObject({ synced: true, objects: 0 });
  });

  it('a folder with no manifest file at start holds the sync back (a volume not filled yet), said once; a file appearing syncs it; "# nothing" is an empty cluster', async () => {
    await writeFile(join(dir, 'notes.txt'), 'not a manifest\n');
    const err = await source(dir)
      .start(new Recorder())
      .then(
        () => null,
        (e: unknown) => e as Error & { code: string },
      );
    expect(err?.code).toBe('KPROXY_ERR_SOURCE_NOT_SYNCED');
    expect(err?.message).toMatch(/could not be read completely: folder .* holds no manifest file \(\*\.yaml, \*\.yml, \*\.json\); .*"# nothing"/);

    const { FakeClock } = await import('../../clock-fake.ts');
    const clock = new FakeClock();
    const log = new MemoryLog();
    const r = new Recorder();
    const s = new FileSource({ path: dir, nodeName: 'node-a', clock, logger: log.logger, pollMs: 5000 });
    await s.start(r);
    try {
      expect(s.status()).toMatchObject({ synced: false, waitingFor: expect.stringMatching(/holds no manifest file/), lastError: expect.stringMatching(/nothing is synced until one appears/) });
      await clock.advanceAsync(5000);
      await s.reloadNow();
      expect(log.lines('warn')).toHaveLength(1);
      expect(s.status()).toMatchObject({ synced: false, lastError: expect.stringMatching(/holds no manifest file/) });
      expect(r.synced).toEqual([]);
      await writeFile(join(dir, 'empty.yaml'), '# nothing\n');
      await s.reloadNow();
      expect(s.status()).toMatchObject({ synced: true, objects: 0 });
      expect(s.status().lastError).toBeUndefined();
      expect(r.synced).toEqual(['Service', 'EndpointSlice', 'Node']);
    } finally {
      await s.stop();
    }
  });

  it('a folder emptied after the first sync is an empty cluster (each file deleted on purpose removes its objects)', async () => {
    await writeFile(join(dir, 'a.yaml'), svc('web'));
    const r = new Recorder();
    const s = source(dir);
    await s.start(r);
    await unlink(join(dir, 'a.yaml'));
    await s.reloadNow();
    expect(r.events).toEqual(['add Service web', 'delete Service web']);
    expect(s.status()).toMatchObject({ synced: true, objects: 0 });
  });
});

describe("FileSource and this node's name", () => {
  it("warns once when the manifests describe Nodes but none by this node's name", async () => {
    const nodes = (...names: string[]) => JSON.stringify({ apiVersion: 'v1', kind: 'List', items: names.map((name) => ({ apiVersion: 'v1', kind: 'Node', metadata: { name } })) });
    await writeFile(join(dir, 'nodes.json'), nodes('node-b', 'node-c'));
    const log = new MemoryLog();
    const s = source(dir, log);
    await s.start(new Recorder());
    await s.reloadNow();
    expect(log.lines('warn')).toEqual([expect.stringMatching(/the manifests describe Nodes node-b, node-c but none named node-a \(check --hostname-override\)/)]);
    await writeFile(join(dir, 'nodes.json'), '# no Nodes described\n');
    await s.reloadNow();
    expect(log.lines('warn')).toHaveLength(1);
  });
});

describe('FileSource after start', () => {
  it('an edit to "# nothing" removes the file\'s objects; an empty write or a parse error keeps them', async () => {
    const file = join(dir, 'a.yaml');
    await writeFile(file, `${svc('web')}---\n${svc('api')}`);
    const r = new Recorder();
    const s = source(dir);
    await s.start(r);
    await writeFile(file, '{ broken\n');
    await s.reloadNow();
    await writeFile(file, '');
    await s.reloadNow();
    expect(r.events).toEqual(['add Service web', 'add Service api']);
    await writeFile(file, '# nothing: this node serves no Services for now\n');
    await s.reloadNow();
    expect(r.events.slice(2).sort()).toEqual(['delete Service api', 'delete Service web']);
    expect(s.status()).toMatchObject({ synced: true, objects: 0 });
    expect(s.status().lastError).toBeUndefined();
  });

  it('a file that parses as YAML but holds no Kubernetes object is a parse error: it holds the first sync back, and later keeps the last good state', async () => {
    const file = join(dir, 'a.yaml');
    await writeFile(file, 'oops\n');
    const log = new MemoryLog();
    const r = new Recorder();
    const s = source(dir, log, true);
    await s.start(r);
    try {
      expect(r.synced).toEqual([]);
      expect(s.status()).toMatchObject({ synced: false, counters: { parseErrors: 1 } });
      expect(s.status().waitingFor).toBe(`${file}:1: document 1: not a Kubernetes object (a string: "oops") [KPROXY_ERR_MANIFEST_PARSE]`);
      await writeFile(file, `${svc('web')}---\n${svc('api')}`);
      await s.reloadNow();
      expect(r.synced).toEqual(['Service', 'EndpointSlice', 'Node']);
      expect(r.events).toEqual(['add Service web', 'add Service api']);
      // Clobbered, then half written (the second Service cut off before its name): both keep web and api.
      for (const text of ['oops\n', `${svc('web')}---\napiVersion: v1\nkind: Service\nmetadata:\n`]) {
        await writeFile(file, text);
        await s.reloadNow();
        expect(r.events).toEqual(['add Service web', 'add Service api']);
        expect(s.status().lastError).toMatch(/a\.yaml:\d+: document \d: .*keeping the last good state of a\.yaml/);
      }
      expect(s.status().counters.parseErrors).toBe(3);
      expect(log.lines('error').at(-1)).toMatch(/a\.yaml:6: document 2: Service without metadata\.name \[KPROXY_ERR_MANIFEST_PARSE\] \(keeping the last good state of a\.yaml\)/);
    } finally {
      await s.stop();
    }
  });

  it('a broken file is counted and logged once per version, not at every poll', async () => {
    const { FakeClock } = await import('../../clock-fake.ts');
    const clock = new FakeClock(Date.now() + 60_000); // file times are in the past: no "recently written" re-reads
    const file = join(dir, 'a.yaml');
    await writeFile(file, svc('web'));
    const log = new MemoryLog();
    const s = new FileSource({ path: dir, nodeName: 'node-a', clock, logger: log.logger, watch: false });
    await s.start(new Recorder());
    await writeFile(file, '{ broken\n');
    for (let i = 0; i < 3; i++) await s.reloadNow();
    expect(s.status().counters.parseErrors).toBe(1);
    expect(log.lines('error')).toHaveLength(1);
  });
});

describe('FileSource polling', () => {
  it('re-checks the files on its poll period even when no change event arrives', async () => {
    const { FakeClock } = await import('../../clock-fake.ts');
    const clock = new FakeClock();
    const file = join(dir, 'a.yaml');
    await writeFile(file, svc('web'));
    const r = new Recorder();
    // The change event's debounce (60 s) cannot fire within this test: only the poll can see the edit.
    const s = new FileSource({ path: file, nodeName: 'node-a', clock, logger: new MemoryLog().logger, watch: true, pollMs: 5000, debounceMs: 60_000 });
    await s.start(r);
    try {
      await writeFile(file, svc('web', 81) + '# with a different size\n');
      await clock.advanceAsync(4999);
      expect(r.events).toEqual(['add Service web']);
      await clock.advanceAsync(1);
      await waitFor(() => r.events.length === 2, { what: 'the polled change' });
      expect(r.events).toEqual(['add Service web', 'update Service web (was port 80)']);
    } finally {
      await s.stop();
    }
  });
});
