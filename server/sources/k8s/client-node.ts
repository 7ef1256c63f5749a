import { readFileSync } from 'node:fs';
import { createRequire, registerHooks } from 'node:module';
import { pathToFileURL } from 'node:url';
import type { KubeConfig, ListWatch, Watch } from '@kubernetes/client-node';
import type { HttpMethod, IsomorphicFetchHttpLibrary, RequestContext } from '@kubernetes/client-node/dist/gen/http/http.js';

/**
 * ClientNode is the part of @kubernetes/client-node kproxy uses: the kubeconfig
 * and its credentials, the watch and ListWatch of the informers, and a request
 * context that carries the kubeconfig's credentials (TLS client certificates,
 * tokens, exec plugins) for kproxy's own plain JSON requests.
 */
export interface ClientNode {
  readonly KubeConfig: typeof KubeConfig;
  readonly Watch: typeof Watch;
  readonly ListWatch: typeof ListWatch;
  readonly RequestContext: typeof RequestContext;
  readonly HttpMethod: typeof HttpMethod;
  /** HttpLibrary: the client's own fetch (undici's, the one the credentials' dispatcher is made for). */
  readonly HttpLibrary: typeof IsomorphicFetchHttpLibrary;
}

let loading: Promise<ClientNode> | null = null;

/**
 * loadClientNode imports the Kubernetes client on first use: a node reading
 * manifest files never loads it (it costs tens of MiB resident). It imports the
 * client's modules one by one rather than its index, which loads every
 * generated API and model class (about 25 MB of source, which V8 keeps) where
 * kproxy needs none: its lists, Events and access reviews are plain JSON
 * requests (api-request.ts).
 */
export function loadClientNode(): Promise<ClientNode> {
  loading ??= load();
  return loading;
}

async function load(): Promise<ClientNode> {
  const hooks = lightHooks();
  try {
    const [config, watch, cache, http] = await Promise.all([
      import('@kubernetes/client-node/dist/config.js'),
      import('@kubernetes/client-node/dist/watch.js'),
      import('@kubernetes/client-node/dist/cache.js'),
      import('@kubernetes/client-node/dist/gen/http/http.js'),
    ]);
    return {
      KubeConfig: config.KubeConfig,
      Watch: watch.Watch,
      ListWatch: cache.ListWatch,
      RequestContext: http.RequestContext,
      HttpMethod: http.HttpMethod,
      HttpLibrary: http.IsomorphicFetchHttpLibrary,
    };
  } finally {
    hooks?.deregister();
  }
}

/** GEN_INDEX_NAMES: what client-node's config.js takes from its generated index, all of which two small modules hold. */
const GEN_INDEX_NAMES = ['ServerConfiguration', 'createConfiguration'];

/** Redirect: an import of `specifier` by one client-node module, answered by a module of kproxy's. */
interface Redirect {
  readonly parentURL: string;
  readonly specifier: string;
  readonly url: string;
}

/**
 * lightHooks points two client-node modules away from imports that load
 * every generated API or model class, each only when its source shows it
 * takes no more than the small module kproxy offers instead (read first):
 * another client-node version that needs more loads them as before (it costs
 * memory and start time, never a failed start).
 *
 * - config.js (KubeConfig) imports two functions from the generated index,
 *   which re-exports every generated API and model: gen-config.ts instead;
 * - cache.js (ListWatch) passes its selectors, strings, through the
 *   serializer, which loads every model class: list-watch-serializer.ts.
 */
function lightHooks(): { deregister(): void } | null {
  const redirects = [lightConfig(), lightCacheSerializer()].filter((r): r is Redirect => r !== null);
  if (redirects.length === 0) return null;
  return registerHooks({
    resolve(specifier, context, next) {
      const r = redirects.find((x) => x.specifier === specifier && x.parentURL === context.parentURL);
      return r ? { url: r.url, shortCircuit: true } : next(specifier, context);
    },
  });
}

/** clientModule: the file URL and source text of a client-node module, or null when it cannot be read. */
function clientModule(name: string): { url: string; source: string } | null {
  try {
    const path = createRequire(import.meta.url).resolve(`@kubernetes/client-node/dist/${name}`);
    return { url: pathToFileURL(path).href, source: readFileSync(path, 'utf8') };
  } catch {
    return null; // an unexpected layout: the module's own imports it is
  }
}

/** ownModule: a module beside this one, by the same extension (.ts here, .js once built). */
function ownModule(name: string): string {
  return new URL(`./${name}${import.meta.url.slice(import.meta.url.lastIndexOf('.'))}`, import.meta.url).href;
}

function lightConfig(): Redirect | null {
  const m = clientModule('config.js');
  if (!m) return null;
  const imports = [...m.source.matchAll(/import\s*\{([^}]*)\}\s*from\s*'\.\/gen\/index\.js'/g)];
  const names = imports
    .flatMap((i) =>
      i[1]
        .split(',')
        .map((n) => n.trim())
        .filter(Boolean),
    )
    .sort();
  if (imports.length !== 1 || names.join() !== GEN_INDEX_NAMES.join() || /from\s*'\.\/gen\/index\.js'/.test(m.source.replace(imports[0][0], ''))) return null;
  return { parentURL: m.url, specifier: './gen/index.js', url: ownModule('gen-config') };
}

function lightCacheSerializer(): Redirect | null {
  const m = clientModule('cache.js');
  if (!m) return null;
  const imports = [...m.source.matchAll(/import\s*([^;]*?)\s*from\s*'\.\/serializer\.js'/g)];
  if (imports.length !== 1 || imports[0][1].replace(/\s/g, '') !== '{ObjectSerializer}') return null;
  // Every use: ObjectSerializer.serialize(this.<field>, 'string').
  const uses = m.source.match(/\bObjectSerializer\b/g)?.length ?? 0;
  const stringUses = m.source.match(/\bObjectSerializer\.serialize\(this\.\w+, 'string'\)/g)?.length ?? 0;
  if (uses !== stringUses + 1) return null;
  return { parentURL: m.url, specifier: './serializer.js', url: ownModule('list-watch-serializer') };
}
