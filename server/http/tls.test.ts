import { copyFileSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { get } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { installPair, selfSignedCert, type SelfSigned } from '../../test/tls-cert.ts';
import { waitFor } from '../../test/wait.ts';
import { realClock } from '../clock.ts';
import { MemoryLog } from '../log.ts';
import { createLimitedServer, HEALTH_LIMITS, type LimitedServer } from './limits.ts';
import { TlsFiles } from './tls.ts';

/** served asks the server over HTTPS (trusting ca) and says which certificate it presented. */
function served(port: number, ca: string): Promise<{ status: number; fingerprint: string }> {
  return new Promise((resolve, reject) => {
    const req = get({ host: '127.0.0.1', port, path: '/', ca, servername: 'localhost', agent: false }, (res) => {
      const fingerprint = (res.socket as TLSSocket).getPeerCertificate().fingerprint256;
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, fingerprint }));
    });
    req.on('error', reject);
  });
}

describe('TlsFiles: the dashboard certificate, followed as it changes', () => {
  let dir: string;
  let server: LimitedServer | null = null;
  let tls: TlsFiles | null = null;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kpt-tls-'));
  });
  afterEach(async () => {
    tls?.close();
    if (server) await new Promise<void>((r) => server!.close(() => r()));
    server = null;
    rmSync(dir, { recursive: true, force: true });
  });

  async function start(certFile: string, keyFile: string, log = new MemoryLog()) {
    tls = new TlsFiles({ certFile, keyFile, logger: log.logger, clock: realClock, debounceMs: 50, pollMs: 60_000 });
    const material = await tls.load();
    server = createLimitedServer(HEALTH_LIMITS, (_req, res) => res.end('ok'), { tls: material });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    tls.serve(server as import('node:https').Server);
    return (server.address() as { port: number }).port;
  }

  it('serves HTTPS with the pair, and takes a rotated pair into service without a restart', async () => {
    const first = selfSignedCert(dir, 'first');
    const second = selfSignedCert(dir, 'second');
    const certFile = join(dir, 'tls.crt');
    const keyFile = join(dir, 'tls.key');
    installPair(first, certFile, keyFile);
    const log = new MemoryLog();
    const port = await start(certFile, keyFile, log);
    expect(await served(port, first.cert)).toEqual({ status: 200, fingerprint: first.fingerprint });

    // Rotation as a writer does it: the new files replace the old ones.
    installPair(second, certFile, keyFile);
    await waitFor(async () => (await served(port, second.cert).catch(() => null))?.fingerprint === second.fingerprint, { what: 'the rotated certificate to be served' });
    expect(tls!.reloads).toBe(1);
    expect(log.lines('info').join('\n')).toMatch(/took the dashboard's new TLS certificate into service/);
  });

  it('follows a Secret volume, whose files change by swapping a symlinked folder', async () => {
    const first = selfSignedCert(dir, 'first');
    const second = selfSignedCert(dir, 'second');
    // The kubelet's layout: tls.crt -> ..data/tls.crt, ..data -> ..v1, swapped to ..v2 by an atomic rename.
    const volume = join(dir, 'volume');
    writeVersion(join(volume, '..v1'), first);
    symlinkSync('..v1', join(volume, '..data'));
    symlinkSync('..data/tls.crt', join(volume, 'tls.crt'));
    symlinkSync('..data/tls.key', join(volume, 'tls.key'));
    const port = await start(join(volume, 'tls.crt'), join(volume, 'tls.key'));
    expect((await served(port, first.cert)).fingerprint).toBe(first.fingerprint);

    writeVersion(join(volume, '..v2'), second);
    symlinkSync('..v2', join(volume, '..data_tmp'));
    renameSync(join(volume, '..data_tmp'), join(volume, '..data'));
    await waitFor(async () => (await served(port, second.cert).catch(() => null))?.fingerprint === second.fingerprint, { what: 'the certificate of the swapped folder to be served' });
  });

  it('keeps serving the last good pair when a changed pair does not load, logs it and counts it', async () => {
    const first = selfSignedCert(dir, 'first');
    const other = selfSignedCert(dir, 'other');
    const certFile = join(dir, 'tls.crt');
    const keyFile = join(dir, 'tls.key');
    installPair(first, certFile, keyFile);
    const log = new MemoryLog();
    const port = await start(certFile, keyFile, log);
    // A key that does not belong to the certificate.
    copyFileSync(other.keyFile, keyFile);
    await waitFor(() => tls!.reloadErrors > 0, { what: 'the mismatched pair to be refused' });
    expect((await served(port, first.cert)).fingerprint).toBe(first.fingerprint);
    expect(log.lines('error').join('\n')).toMatch(/the dashboard's TLS certificate or key changed but does not load; still serving the previous pair: .*code=KPROXY_ERR_TLS_RELOAD/);
  });

  it('refuses a pair that does not load at start', async () => {
    const first = selfSignedCert(dir, 'first');
    const other = selfSignedCert(dir, 'other');
    const t = new TlsFiles({ certFile: first.certFile, keyFile: other.keyFile, logger: new MemoryLog().logger, clock: realClock });
    await expect(t.load()).rejects.toMatchObject({
      code: 'KPROXY_ERR_FLAG_INVALID',
      message: expect.stringMatching(/--dashboard-tls-cert-file .* and --dashboard-tls-private-key-file .*: .*(key values mismatch|KEY_VALUES_MISMATCH)/i),
    });
    writeFileSync(join(dir, 'junk.crt'), 'not PEM');
    const junk = new TlsFiles({ certFile: join(dir, 'junk.crt'), keyFile: first.keyFile, logger: new MemoryLog().logger, clock: realClock });
    await expect(junk.load()).rejects.toMatchObject({ code: 'KPROXY_ERR_FLAG_INVALID' });
  });
});

/** writeVersion writes one version folder of a Secret volume. */
function writeVersion(folder: string, pair: SelfSigned): void {
  mkdirSync(folder, { recursive: true });
  installPair(pair, join(folder, 'tls.crt'), join(folder, 'tls.key'));
}
