import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { Server as HttpsServer } from 'node:https';
import { dirname } from 'node:path';
import { createSecureContext } from 'node:tls';
import type { Clock, TimerHandle } from '../clock.ts';
import { errorMessage, FlagInvalidError, TlsReloadError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { TlsMaterial } from './limits.ts';

export interface TlsFilesOptions {
  certFile: string;
  keyFile: string;
  logger: Logger;
  clock: Clock;
  /** pollMs: how often the files are compared with what is served, besides watching them (default 60 s). */
  pollMs?: number;
  /** debounceMs: a change is read this long after the last event (writers replace files in steps; default 500 ms). */
  debounceMs?: number;
}

/**
 * TlsFiles is a listener's certificate and key, read from PEM files and
 * followed as they change, as kube-rbac-proxy follows its --tls-cert-file and
 * --tls-private-key-file: a rotated pair is served to new connections without
 * a restart. A Secret mounted as a volume changes by an atomic swap of a
 * symlinked folder, which a watch on the file itself misses: the folders are
 * watched, and the files are also compared every pollMs. A pair that does not
 * load (unreadable, not PEM, a key that does not match the certificate) is
 * refused at start (exit 1); later, it is logged and counted, and the last
 * good pair stays in service.
 */
export class TlsFiles {
  readonly #o: TlsFilesOptions;
  #material: TlsMaterial | null = null;
  readonly #servers = new Set<HttpsServer>();
  readonly #watchers: FSWatcher[] = [];
  #poll: TimerHandle | null = null;
  #debounce: TimerHandle | null = null;
  #reloading: Promise<void> | null = null;
  #closed = false;
  /** reloads: pairs taken into service after the first; reloadErrors: changed pairs that did not load. */
  reloads = 0;
  reloadErrors = 0;

  constructor(opts: TlsFilesOptions) {
    this.#o = opts;
  }

  /** material is the pair in service (after load()). */
  get material(): TlsMaterial {
    if (!this.#material) throw new Error('TlsFiles.material read before load()');
    return this.#material;
  }

  /** load reads the pair for the first time; a pair that does not load is a FlagInvalidError (exit 1). */
  async load(): Promise<TlsMaterial> {
    try {
      this.#material = await this.#read();
    } catch (err) {
      throw new FlagInvalidError(`--dashboard-tls-cert-file ${this.#o.certFile} and --dashboard-tls-private-key-file ${this.#o.keyFile}: ${errorMessage(err)}`, { cause: err });
    }
    return this.#material;
  }

  /** serve makes a listening HTTPS server take every later pair; watching starts with the first server. */
  serve(server: HttpsServer): void {
    this.#servers.add(server);
    server.once('close', () => this.#servers.delete(server));
    if (this.#watchers.length === 0 && this.#poll === null) this.#watch();
  }

  /** reload reads the files again and serves the pair if it changed and loads (what a file change triggers). */
  reload(): Promise<void> {
    this.#reloading ??= this.#reload().finally(() => (this.#reloading = null));
    return this.#reloading;
  }

  close(): void {
    this.#closed = true;
    for (const w of this.#watchers.splice(0)) w.close();
    if (this.#poll) this.#o.clock.clearTimeout(this.#poll);
    if (this.#debounce) this.#o.clock.clearTimeout(this.#debounce);
    this.#poll = this.#debounce = null;
  }

  async #read(): Promise<TlsMaterial> {
    const [cert, key] = await Promise.all([readFile(this.#o.certFile, 'utf8'), readFile(this.#o.keyFile, 'utf8')]);
    // Throws on text that is not PEM and on a key that does not belong to the certificate.
    createSecureContext({ cert, key });
    return { cert, key };
  }

  async #reload(): Promise<void> {
    if (this.#closed) return;
    let next: TlsMaterial;
    try {
      next = await this.#read();
    } catch (err) {
      const current = this.#material;
      // A half-written pair (certificate replaced, key not yet) is retried by the next event or poll.
      this.reloadErrors++;
      const error = new TlsReloadError(`the dashboard's TLS certificate or key changed but does not load; still serving the previous pair: ${errorMessage(err)}`, { cause: err });
      this.#o.logger.error(error.message, { code: error.code, cert: this.#o.certFile, key: this.#o.keyFile, serving: current ? 'previous pair' : 'none' });
      return;
    }
    if (this.#material && next.cert === this.#material.cert && next.key === this.#material.key) return;
    this.#material = next;
    this.reloads++;
    for (const s of this.#servers) s.setSecureContext({ cert: next.cert, key: next.key });
    this.#o.logger.info("took the dashboard's new TLS certificate into service", { cert: this.#o.certFile, reloads: this.reloads });
  }

  #changed = () => {
    if (this.#closed) return;
    if (this.#debounce) this.#o.clock.clearTimeout(this.#debounce);
    this.#debounce = this.#o.clock.setTimeout(() => {
      this.#debounce = null;
      void this.reload();
    }, this.#o.debounceMs ?? 500);
  };

  #watch(): void {
    for (const dir of new Set([dirname(this.#o.certFile), dirname(this.#o.keyFile)])) {
      try {
        const w = watch(dir, this.#changed);
        // A folder that goes away (the volume unmounted) ends its watch; the poll still runs.
        w.on('error', (err) => this.#o.logger.warn('watching the TLS files stopped; they are still compared every poll', { dir, err: errorMessage(err) }));
        this.#watchers.push(w);
      } catch (err) {
        this.#o.logger.warn('cannot watch the TLS files; they are compared every poll instead', { dir, err: errorMessage(err) });
      }
    }
    const every = this.#o.pollMs ?? 60_000;
    const tick = () => {
      if (this.#closed) return;
      void this.reload();
      this.#poll = this.#o.clock.setTimeout(tick, every);
    };
    this.#poll = this.#o.clock.setTimeout(tick, every);
  }
}
