import { createHash } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { Clock, TimerHandle } from '../../clock.ts';
import { errorMessage, FileSourceError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import { LABEL_HEADLESS, LABEL_SERVICE_PROXY_NAME, type EndpointSlice, type KubeObject, type Node, type Service } from '../../proxy/kube-objects.ts';
import type { ChangeHandlers } from '../../proxy/proxy-state.ts';
import type { Source, SourceStatus } from '../source.ts';
import { parseManifest, type ManifestObject } from './manifest.ts';

export interface FileSourceOptions {
  path: string;
  nodeName: string;
  clock: Clock;
  logger: Logger;
  /** debounceMs: quiet time after the last change before files are read (editors write in steps). */
  debounceMs?: number;
  /**
   * maxWaitMs: files are read at most this long after the first change of a
   * burst, quiet or not (default 2 x debounceMs). Without it a file changed
   * more often than debounceMs (a generator, a busy ConfigMap) would only be
   * read by the poll.
   */
  maxWaitMs?: number;
  /** maxFileBytes: larger files are refused (absurd sizes), keeping their last good state. */
  maxFileBytes?: number;
  /** watch: follow edits (default true; --once reads once). */
  watch?: boolean;
  /**
   * pollMs: also re-check the files this often (default 5 s). Change events can
   * be lost (inotify limits, network filesystems, a ConfigMap's symlink swap of
   * its ..data folder); a re-check of unchanged files costs one stat each.
   */
  pollMs?: number;
}

const MANIFEST_FILE = /\.(ya?ml|json)$/i;
/** RECENT_MS: files modified this recently are re-read even when their stat looks unchanged. */
const RECENT_MS = 2000;

interface FileState {
  /** objects: the file's last good objects by key. */
  objects: Map<string, ManifestObject>;
  /** fingerprint: inode, size and times the objects were read at. */
  fingerprint: string;
  /** digest: hash of the content they were parsed from (an unchanged re-read is no change). */
  digest: string;
}

/**
 * FileSource reads Services, EndpointSlices and Nodes from a manifest file or a
 * folder of them and follows edits. Each file keeps its last good content: a
 * file that fails to parse, is refused, or is briefly empty (an editor or script
 * in the middle of writing it) changes nothing until it is valid again; deleting
 * the file removes its objects. Changes reach the handlers exactly as informer
 * events would (add, update with the previous object, delete).
 */
export class FileSource implements Source {
  readonly #o: Required<FileSourceOptions>;
  readonly #root: string;
  #isDir = false;
  readonly #files = new Map<string, FileState>();
  /** #emitted: what handlers currently hold, by object key. */
  readonly #emitted = new Map<string, ManifestObject>();
  #handlers: ChangeHandlers | null = null;
  #watcher: FSWatcher | null = null;
  #timer: TimerHandle | null = null;
  /** #burstStart: monotonic time of the first change event not yet read. */
  #burstStart = 0;
  #pollTimer: TimerHandle | null = null;
  #reloading: Promise<void> | null = null;
  #again = false;
  #synced = false;
  #stopped = false;
  #lastError: string | undefined;
  #lastErrorAt: number | undefined;
  readonly #counters = { reloads: 0, parseErrors: 0, objectsAdded: 0, objectsUpdated: 0, objectsDeleted: 0 };

  constructor(opts: FileSourceOptions) {
    const debounceMs = opts.debounceMs ?? 250;
    this.#o = { debounceMs, maxWaitMs: 2 * debounceMs, maxFileBytes: 256 * 1024 * 1024, watch: true, pollMs: 5000, ...opts };
    this.#root = resolve(opts.path);
  }

  async start(handlers: ChangeHandlers): Promise<void> {
    this.#handlers = handlers;
    let st;
    try {
      st = await stat(this.#root);
    } catch (err) {
      throw new FileSourceError(`manifest source ${this.#o.path} cannot be read: ${errorMessage(err)}`, { cause: err });
    }
    this.#isDir = st.isDirectory();
    if (this.#o.watch) this.#startWatching();
    await this.#reload();
    this.#synced = true;
    handlers.onSynced('Service');
    handlers.onSynced('EndpointSlice');
    handlers.onSynced('Node');
  }

  async stop(): Promise<void> {
    this.#watcher?.close();
    this.#watcher = null;
    if (this.#timer) this.#o.clock.clearTimeout(this.#timer);
    if (this.#pollTimer) this.#o.clock.clearTimeout(this.#pollTimer);
    this.#timer = null;
    this.#pollTimer = null;
    this.#stopped = true;
    await this.#reloading;
  }

  status(): SourceStatus {
    return {
      kind: 'file',
      description: `file:${this.#o.path}`,
      synced: this.#synced,
      objects: this.#emitted.size,
      lastError: this.#lastError,
      lastErrorAt: this.#lastErrorAt,
      counters: { ...this.#counters },
    };
  }

  /** reloadNow re-reads the files at once (tests, and SIGHUP). */
  reloadNow(): Promise<void> {
    return this.#reload();
  }

  #startWatching(): void {
    // Watch the folder (or the file's folder): editors replace files by renaming a
    // temporary file over them, which a watch on the file itself would lose.
    const dir = this.#isDir ? this.#root : dirname(this.#root);
    const only = this.#isDir ? null : basename(this.#root);
    this.#schedulePoll();
    try {
      this.#watcher = watch(dir, { persistent: false }, (_event, name) => {
        // A single file: only its own name, and a ConfigMap's ..data swap, matter.
        if (only && name && name !== only && name !== '..data') return;
        this.#scheduleReload();
      });
      this.#watcher.on('error', (err) => this.#fail(`watching ${dir} failed: ${errorMessage(err)}`));
    } catch (err) {
      this.#fail(`watching ${dir} failed, edits will not be followed: ${errorMessage(err)}`);
    }
  }

  #schedulePoll(): void {
    if (this.#stopped || this.#o.pollMs <= 0) return;
    this.#pollTimer = this.#o.clock.setTimeout(() => {
      this.#pollTimer = null;
      void this.#reload().finally(() => this.#schedulePoll());
    }, this.#o.pollMs);
  }

  #scheduleReload(): void {
    const clock = this.#o.clock;
    const now = clock.monotonic();
    if (this.#timer) clock.clearTimeout(this.#timer);
    else this.#burstStart = now;
    const delay = Math.max(0, Math.min(this.#o.debounceMs, this.#burstStart + this.#o.maxWaitMs - now));
    this.#timer = clock.setTimeout(() => {
      this.#timer = null;
      void this.#reload();
    }, delay);
  }

  #fail(message: string): void {
    this.#lastError = message;
    this.#lastErrorAt = this.#o.clock.now();
    this.#o.logger.error(message);
  }

  async #reload(): Promise<void> {
    if (this.#reloading) {
      this.#again = true;
      return this.#reloading;
    }
    this.#reloading = (async () => {
      do {
        this.#again = false;
        try {
          await this.#readAll();
        } catch (err) {
          this.#fail(`reading manifests from ${this.#o.path} failed, keeping the last good state: ${errorMessage(err)}`);
        }
      } while (this.#again);
    })();
    try {
      await this.#reloading;
    } finally {
      this.#reloading = null;
    }
  }

  async #listFiles(): Promise<string[]> {
    if (!this.#isDir) {
      try {
        await stat(this.#root);
        return [this.#root];
      } catch {
        return [];
      }
    }
    const entries = await readdir(this.#root, { withFileTypes: true });
    return entries
      .filter((e) => e.isFile() && MANIFEST_FILE.test(e.name) && !e.name.startsWith('.'))
      .map((e) => join(this.#root, e.name))
      .sort();
  }

  async #readAll(): Promise<void> {
    this.#counters.reloads++;
    const files = await this.#listFiles();
    const present = new Set(files);
    for (const f of [...this.#files.keys()]) {
      if (!present.has(f)) {
        this.#o.logger.info('manifest file removed, deleting its objects', { file: f, objects: this.#files.get(f)!.objects.size });
        this.#files.delete(f);
      }
    }
    for (const file of files) await this.#readFile(file);
    this.#emitDiff();
  }

  async #readFile(file: string): Promise<void> {
    let st;
    try {
      st = await stat(file);
    } catch {
      return; // vanished between readdir and stat: the next event re-reads
    }
    // File times are coarse (the kernel's tick): two writes in one tick can leave
    // size and mtime equal. A recently touched file is therefore always re-read,
    // and compared by content.
    const fingerprint = `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    const known = this.#files.get(file);
    const recent = this.#o.clock.now() - Math.max(st.mtimeMs, st.ctimeMs) < RECENT_MS;
    if (known && known.fingerprint === fingerprint && !recent) return;
    if (st.size > this.#o.maxFileBytes) {
      this.#counters.parseErrors++;
      return this.#fail(`${file} is ${st.size} bytes, over the ${this.#o.maxFileBytes}-byte limit: keeping its last good state`);
    }
    const text = await readFile(file, 'utf8');
    const digest = createHash('sha256').update(text).digest('base64');
    if (known && known.digest === digest) {
      known.fingerprint = fingerprint;
      return;
    }
    if (text.trim() === '' && known && known.objects.size > 0) {
      // A file is empty for a moment while an editor or `>` redirection rewrites it.
      this.#o.logger.warn('manifest file is empty, keeping its last good objects (delete the file to remove them)', {
        file,
        objects: known.objects.size,
      });
      return;
    }
    try {
      const parsed = parseManifest(file, text);
      for (const s of parsed.skipped) this.#o.logger.warn('manifest object skipped', { reason: s });
      const objects = new Map<string, ManifestObject>();
      for (const o of parsed.objects) {
        if (objects.has(o.key)) this.#o.logger.warn('object defined twice in one file, the later one wins', { file, object: o.key });
        objects.set(o.key, o);
      }
      this.#files.set(file, { objects, fingerprint, digest });
      if (this.#lastError?.startsWith(file)) this.#lastError = undefined;
    } catch (err) {
      this.#counters.parseErrors++;
      this.#fail(`${errorMessage(err)} (keeping the last good state of ${basename(file)})`);
    }
  }

  #emitDiff(): void {
    const h = this.#handlers!;
    const wanted = new Map<string, ManifestObject>();
    for (const state of this.#files.values()) {
      for (const [key, o] of state.objects) {
        const other = wanted.get(key);
        if (other) this.#o.logger.warn('object defined in two files, the later file wins', { object: key, files: `${other.file},${o.file}` });
        if (this.#selected(o)) wanted.set(key, o);
      }
    }
    // Deletes first: a renamed port or moved endpoint must not briefly exist twice.
    for (const [key, prev] of this.#emitted) {
      if (wanted.has(key)) continue;
      this.#emitted.delete(key);
      this.#counters.objectsDeleted++;
      dispatch(h, prev.kind, prev.object, null);
    }
    for (const [key, cur] of wanted) {
      const prev = this.#emitted.get(key);
      // A file that was not re-read keeps its objects: the same object is no change, without serialising it.
      if (prev === cur || (prev && JSON.stringify(prev.object) === JSON.stringify(cur.object))) continue;
      this.#emitted.set(key, cur);
      if (prev) this.#counters.objectsUpdated++;
      else this.#counters.objectsAdded++;
      dispatch(h, cur.kind, prev?.object ?? null, cur.object);
    }
  }

  /** #selected applies the same selectors kproxy's informers use, so both sources deliver the same events. */
  #selected(o: ManifestObject): boolean {
    const labels = o.object.metadata?.labels ?? {};
    if (o.kind === 'Node') return o.object.metadata?.name === this.#o.nodeName;
    if (labels[LABEL_SERVICE_PROXY_NAME] !== undefined) return false;
    if (o.kind === 'Service') {
      if (labels[LABEL_HEADLESS] !== undefined) return false;
      return (o.object as Service).spec?.clusterIP !== 'None';
    }
    return true;
  }
}

function dispatch(h: ChangeHandlers, kind: ManifestObject['kind'], prev: KubeObject | null, cur: KubeObject | null): void {
  if (kind === 'Service') h.onService(prev as Service | null, cur as Service | null);
  else if (kind === 'EndpointSlice') h.onEndpointSlice(prev as EndpointSlice | null, cur as EndpointSlice | null);
  else h.onNode(prev as Node | null, cur as Node | null);
}
