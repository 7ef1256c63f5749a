import { createHash } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { lstat, readdir, readFile, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { Clock, TimerHandle } from '../../clock.ts';
import { errorMessage, SourceNotSyncedError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import { LABEL_HEADLESS, LABEL_SERVICE_PROXY_NAME, type EndpointSlice, type KubeObject, type Node, type Service, type ServiceCIDR } from '../../proxy/kube-objects.ts';
import type { ChangeHandlers } from '../../proxy/proxy-state.ts';
import { keptFields } from '../../proxy/kept-fields.ts';
import type { Source, SourceStatus } from '../../proxy/source.ts';
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
  /**
   * watch: follow edits (default true). Without it (--once) start() is the only
   * read, and it throws SourceNotSyncedError when that read is incomplete.
   */
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

/** Problem is why a file's current content is not used, remembered so an unchanged file is not read and reported again. */
interface Problem {
  readonly message: string;
  /** fingerprint: the file as it was when it failed ("" when it could not even be stat'ed). */
  readonly fingerprint: string;
}

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
 * folder of them and follows edits. It is synced, as an informer after its
 * first list, only once every manifest file it was pointed at has been read
 * successfully: a path or file that is missing, unreadable, empty, too large or
 * fails to parse at start, or a folder with no manifest file, holds kproxy back
 * (nothing is programmed, readiness says why) until it is fixed, instead of
 * counting as an empty cluster.
 * After that each file keeps its last good content: a file that fails to parse,
 * is refused, or is briefly empty (an editor or script in the middle of writing
 * it) changes nothing until it is valid again; a file that says it holds nothing
 * (`# nothing`) and a deleted file remove their objects. Changes reach the
 * handlers exactly as informer events would (add, update with the previous
 * object, delete).
 */
export class FileSource implements Source {
  readonly #o: Required<FileSourceOptions>;
  readonly #root: string;
  #isDir = false;
  readonly #files = new Map<string, FileState>();
  /** #problems: files whose current content is not used (never read, or a bad edit since), by path. */
  readonly #problems = new Map<string, Problem>();
  /** #rootProblem: the path itself cannot be listed (missing, unreadable). */
  #rootProblem: string | undefined;
  /** #emitted: what handlers currently hold, by object key. */
  readonly #emitted = new Map<string, ManifestObject>();
  /** #filesVersion counts changes to #files; #emittedVersion is the one #emitted was diffed from. */
  #filesVersion = 0;
  #emittedVersion = -1;
  #handlers: ChangeHandlers | null = null;
  #watcher: FSWatcher | null = null;
  #timer: TimerHandle | null = null;
  /** #burstStart: monotonic time of the first change event not yet read. */
  #burstStart = 0;
  #pollTimer: TimerHandle | null = null;
  #reloading: Promise<void> | null = null;
  #again = false;
  #watchStarted = false;
  /** #nodeNamesWarned: the Node names last warned about (none named like this node). */
  #nodeNamesWarned: string | undefined;
  #synced = false;
  /** #announced: handlers were told the source is synced (once). */
  #announced = false;
  #stopped = false;
  #lastError: string | undefined;
  #lastErrorAt: number | undefined;
  #lastErrorFile: string | undefined;
  readonly #counters = { reloads: 0, parseErrors: 0, readErrors: 0, objectsSkipped: 0, objectsAdded: 0, objectsUpdated: 0, objectsDeleted: 0 };

  constructor(opts: FileSourceOptions) {
    const debounceMs = opts.debounceMs ?? 250;
    this.#o = { debounceMs, maxWaitMs: 2 * debounceMs, maxFileBytes: 256 * 1024 * 1024, watch: true, pollMs: 5000, ...opts };
    this.#root = resolve(opts.path);
  }

  async start(handlers: ChangeHandlers): Promise<void> {
    this.#handlers = handlers;
    if (this.#o.watch) this.#schedulePoll();
    await this.#reload();
    if (!this.#synced && !this.#o.watch) {
      throw new SourceNotSyncedError(`manifests from ${this.#o.path} could not be read completely: ${this.#waitingFor()}`);
    }
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
      ...(this.#synced ? {} : { waitingFor: this.#waitingFor() }),
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

  /** #waitingFor says which files hold the first sync back, and why (the first few). */
  #waitingFor(): string {
    if (this.#rootProblem) return this.#rootProblem;
    const problems = [...this.#problems.entries()].filter(([file]) => !this.#files.has(file)).map(([, p]) => p.message);
    if (problems.length === 0) return `the first read of ${this.#o.path}`;
    const more = problems.length > 3 ? ` (and ${problems.length - 3} more files)` : '';
    return problems.slice(0, 3).join('; ') + more;
  }

  #startWatching(): void {
    // Watch the folder (or the file's folder): editors replace files by renaming a
    // temporary file over them, which a watch on the file itself would lose.
    const dir = this.#isDir ? this.#root : dirname(this.#root);
    const only = this.#isDir ? null : basename(this.#root);
    try {
      this.#watcher = watch(dir, { persistent: false }, (_event, name) => {
        // A single file: only its own name, and a ConfigMap's ..data swap, matter.
        if (only && name && name !== only && name !== '..data') return;
        this.#scheduleReload();
      });
      this.#watcher.on('error', (err) => this.#fail(`watching ${dir} failed: ${errorMessage(err)}`, 'watch'));
    } catch (err) {
      this.#fail(`watching ${dir} failed, edits will not be followed: ${errorMessage(err)}`, 'watch');
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

  /** #fail records and logs a source error; `about` is the file (or 'root', 'watch') it concerns, so fixing that clears it. */
  #fail(message: string, about: string, level: 'error' | 'warn' = 'error'): void {
    this.#lastError = message;
    this.#lastErrorFile = about;
    this.#lastErrorAt = this.#o.clock.now();
    this.#o.logger[level](message);
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
          this.#fail(`reading manifests from ${this.#o.path} failed, keeping the last good state: ${errorMessage(err)}`, 'root');
        }
      } while (this.#again);
    })();
    try {
      await this.#reloading;
    } finally {
      this.#reloading = null;
    }
  }

  /**
   * #listFiles lists the manifest files the path stands for, or null when the
   * path cannot be listed (that is a problem, never "no files": a missing
   * folder must not delete every object).
   */
  async #listFiles(): Promise<string[] | null> {
    let st;
    try {
      st = await stat(this.#root);
    } catch (err) {
      this.#rootProblem = `${this.#o.path} cannot be read: ${errorMessage(err)}`;
      return null;
    }
    this.#isDir = st.isDirectory();
    let files: string[];
    if (!this.#isDir) files = [this.#root];
    else {
      try {
        const entries = await readdir(this.#root, { withFileTypes: true });
        // A ConfigMap volume presents each key as a symbolic link (name -> ..data/name):
        // links count as files; one whose target is missing is a file that cannot be read.
        files = entries
          .filter((e) => (e.isFile() || e.isSymbolicLink()) && MANIFEST_FILE.test(e.name) && !e.name.startsWith('.'))
          .map((e) => join(this.#root, e.name))
          .sort();
      } catch (err) {
        this.#rootProblem = `folder ${this.#o.path} cannot be listed: ${errorMessage(err)}`;
        return null;
      }
    }
    this.#rootProblem = undefined;
    if (this.#lastErrorFile === 'root') this.#clearLastError();
    // Watching starts once the path exists (a missing one is found again by the poll).
    if (this.#o.watch && !this.#watchStarted && !this.#stopped) {
      this.#watchStarted = true;
      this.#startWatching();
    }
    return files;
  }

  async #readAll(): Promise<void> {
    this.#counters.reloads++;
    const rootProblemBefore = this.#rootProblem;
    const files = await this.#listFiles();
    if (files === null) {
      const message = `${this.#rootProblem} (${this.#synced ? 'keeping the last good state' : 'nothing is synced until it can be read'})`;
      // The poll finds it again every few seconds: log it when it changes, not each time.
      if (this.#lastError !== message) {
        this.#counters.readErrors++;
        this.#fail(message, 'root');
      }
      return;
    }
    const present = new Set(files);
    for (const f of [...this.#files.keys()]) {
      if (!present.has(f)) {
        this.#o.logger.info('manifest file removed, deleting its objects', { file: f, objects: this.#files.get(f)!.objects.size });
        this.#files.delete(f);
        this.#filesVersion++;
      }
    }
    for (const f of [...this.#problems.keys()]) if (!present.has(f)) this.#problems.delete(f);
    if (!this.#synced && this.#isDir && files.length === 0) {
      this.#noManifestYet(rootProblemBefore);
      this.#emitDiff();
      return;
    }
    let holdingBack = 0;
    for (const file of files) if (await this.#readFile(file)) holdingBack++;
    if (!this.#synced && holdingBack === 0) {
      this.#synced = true;
      this.#o.logger.info('manifests read', { path: this.#o.path, files: files.length });
    }
    // Objects of the files read so far reach the handlers even before the source
    // is synced (as an informer's list does); nothing is programmed until then.
    this.#emitDiff();
    if (this.#synced && !this.#announced) {
      this.#announced = true;
      this.#handlers!.onSynced('Service');
      this.#handlers!.onSynced('EndpointSlice');
      this.#handlers!.onSynced('Node');
    }
  }

  /**
   * #noManifestYet holds the first sync back while the folder holds no manifest
   * file: at start that is no cluster yet (a volume not mounted or not filled,
   * a wrong path), and syncing it would remove every Service rule of the node.
   * A folder meant to describe no objects holds a file that says so. After the
   * first sync, deleting every file is deleting every object, as for one file.
   */
  #noManifestYet(rootProblemBefore: string | undefined): void {
    const message = `folder ${this.#o.path} holds no manifest file (*.yaml, *.yml, *.json); a folder meant to describe no objects holds a file that says so, e.g. "# nothing"`;
    this.#rootProblem = message;
    const full = `${message} (nothing is synced until one appears)`;
    // The poll finds the folder empty again every few seconds: logged when it becomes so,
    // and the error (cleared by the successful listing) stands again without a new log line.
    if (rootProblemBefore !== message) return this.#fail(full, 'root', 'warn');
    this.#lastError = full;
    this.#lastErrorFile = 'root';
  }

  /** #readFile reads one file if it changed; it resolves true when the file has never been read successfully (it holds the first sync back). */
  async #readFile(file: string): Promise<boolean> {
    await this.#readFileContent(file);
    return this.#problems.has(file) && !this.#files.has(file);
  }

  async #readFileContent(file: string): Promise<void> {
    let st;
    try {
      st = await stat(file);
    } catch (err) {
      // A file listed a moment ago that vanished is read again with the next event; a
      // link whose target is missing stays a problem until it is fixed or removed.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' && !(await isLink(file))) return;
      return this.#problem(file, '', `${file} cannot be read: ${errorMessage(err)}`, 'readErrors');
    }
    if (!st.isFile()) return; // a link to a folder is no manifest, and holds nothing back
    // File times are coarse (the kernel's tick): two writes in one tick can leave
    // size and mtime equal. A recently touched file is therefore always re-read,
    // and compared by content.
    const fingerprint = `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    const known = this.#files.get(file);
    const recent = this.#o.clock.now() - Math.max(st.mtimeMs, st.ctimeMs) < RECENT_MS;
    const failed = this.#problems.get(file);
    if (!recent && (failed ? failed.fingerprint === fingerprint : known?.fingerprint === fingerprint)) return;
    if (st.size > this.#o.maxFileBytes) {
      return this.#problem(file, fingerprint, `${file} is ${st.size} bytes, over the ${this.#o.maxFileBytes}-byte limit`, 'parseErrors');
    }
    let bytes: Buffer;
    try {
      bytes = await readFile(file);
    } catch (err) {
      return this.#problem(file, fingerprint, `${file} cannot be read: ${errorMessage(err)}`, 'readErrors');
    }
    // The bytes are hashed as read (not the text encoded again), and decoded only when they changed.
    const digest = createHash('sha256').update(bytes).digest('base64');
    if (known && known.digest === digest) {
      known.fingerprint = fingerprint;
      this.#solved(file);
      return;
    }
    const text = bytes.toString('utf8');
    if (text.trim() === '' && (!known || known.objects.size > 0)) {
      // A file is empty for a moment while an editor or `>` redirection rewrites it:
      // never read as "no objects". A file meant to hold none says so with a comment.
      if (known) {
        this.#o.logger.warn('manifest file is empty, keeping its last good objects (delete the file, or write "# nothing" in it, to remove them)', {
          file,
          objects: known.objects.size,
        });
        this.#problems.set(file, { message: `${file} is empty`, fingerprint });
        return;
      }
      return this.#problem(file, fingerprint, `${file} is empty (waiting for its content; a file meant to hold no objects says so with a comment, e.g. "# nothing")`, null);
    }
    try {
      // Only the fields kproxy reads are kept (and compared on the next read), as the informers keep them.
      const parsed = parseManifest(file, text, keptFields);
      for (const s of parsed.skipped) this.#o.logger.warn('manifest object skipped', { reason: s });
      this.#counters.objectsSkipped += parsed.skipped.length;
      const objects = new Map<string, ManifestObject>();
      for (const o of parsed.objects) {
        if (objects.has(o.key)) this.#o.logger.warn('object defined twice in one file, the later one wins', { file, object: o.key });
        objects.set(o.key, o);
      }
      this.#files.set(file, { objects, fingerprint, digest });
      this.#filesVersion++;
      this.#solved(file);
    } catch (err) {
      this.#problem(file, fingerprint, errorMessage(err), 'parseErrors');
    }
  }

  /**
   * #problem records why a file's content is not used and says what kproxy
   * keeps; counted and logged once per version of the file (the poll and
   * change events may look at it again). `counter` null: not an error (an
   * empty file being written), a warning.
   */
  #problem(file: string, fingerprint: string, message: string, counter: 'parseErrors' | 'readErrors' | null): void {
    const prev = this.#problems.get(file);
    this.#problems.set(file, { message, fingerprint });
    if (prev && prev.message === message && prev.fingerprint === fingerprint) return;
    if (counter) this.#counters[counter]++;
    const kept = this.#files.has(file)
      ? `keeping the last good state of ${basename(file)}`
      : this.#synced
        ? `${basename(file)} is left out until it can be read`
        : 'nothing is synced until it can be read';
    this.#fail(`${message} (${kept})`, file, counter ? 'error' : 'warn');
  }

  /** #solved forgets a file's problem once its content is in use again. */
  #solved(file: string): void {
    if (this.#problems.delete(file) && this.#lastErrorFile === file) this.#clearLastError();
  }

  #clearLastError(): void {
    this.#lastError = undefined;
    this.#lastErrorFile = undefined;
  }

  #emitDiff(): void {
    // No file read or removed since the last diff: nothing changed. The poll finds unchanged
    // files every few seconds, and a diff builds a map of every object of the cluster.
    if (this.#emittedVersion === this.#filesVersion) return;
    this.#emittedVersion = this.#filesVersion;
    const h = this.#handlers!;
    const wanted = new Map<string, ManifestObject>();
    const nodes = new Set<string>();
    for (const state of this.#files.values()) {
      for (const [key, o] of state.objects) {
        const other = wanted.get(key);
        if (other) this.#o.logger.warn('object defined in two files, the later file wins', { object: key, files: `${other.file},${o.file}` });
        if (o.kind === 'Node') nodes.add(o.object.metadata?.name ?? '');
        if (this.#selected(o)) wanted.set(key, o);
      }
    }
    this.#checkNodeName(nodes);
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

  /**
   * #checkNodeName warns when the manifests describe Nodes but none by this
   * node's name (a mistyped --hostname-override): locality and node addresses
   * stay unknown. Manifests without any Node are normal. Once per set of names.
   */
  #checkNodeName(nodes: ReadonlySet<string>): void {
    const names = [...nodes].sort().join(', ');
    const missing = nodes.size > 0 && !nodes.has(this.#o.nodeName);
    if (!missing || names === this.#nodeNamesWarned) {
      if (!missing) this.#nodeNamesWarned = undefined;
      return;
    }
    this.#nodeNamesWarned = names;
    this.#o.logger.warn(`the manifests describe Nodes ${names} but none named ${this.#o.nodeName} (check --hostname-override): which endpoints are local, and this node's addresses, are unknown`);
  }

  /** #selected applies the same selectors kproxy's informers use, so both sources deliver the same events. */
  #selected(o: ManifestObject): boolean {
    const labels = o.object.metadata?.labels ?? {};
    if (o.kind === 'Node') return o.object.metadata?.name === this.#o.nodeName;
    if (o.kind === 'ServiceCIDR') return true;
    if (labels[LABEL_SERVICE_PROXY_NAME] !== undefined) return false;
    if (o.kind === 'Service') {
      if (labels[LABEL_HEADLESS] !== undefined) return false;
      return (o.object as Service).spec?.clusterIP !== 'None';
    }
    return true;
  }
}

async function isLink(path: string): Promise<boolean> {
  try {
    return (await lstat(path)).isSymbolicLink();
  } catch {
    return false; // gone altogether
  }
}

function dispatch(h: ChangeHandlers, kind: ManifestObject['kind'], prev: KubeObject | null, cur: KubeObject | null): void {
  if (kind === 'Service') h.onService(prev as Service | null, cur as Service | null);
  else if (kind === 'EndpointSlice') h.onEndpointSlice(prev as EndpointSlice | null, cur as EndpointSlice | null);
  else if (kind === 'ServiceCIDR') h.onServiceCIDR?.(prev as ServiceCIDR | null, cur as ServiceCIDR | null);
  else h.onNode(prev as Node | null, cur as Node | null);
}
