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
  const hooks = lightConfigHooks();
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

/**
 * lightConfigHooks points client-node's config.js (KubeConfig) at a small
 * module (gen-config.ts) instead of the generated index it imports two
 * functions from: the index re-exports every generated API and model. Only
 * when config.js imports exactly those two names, read from its source first:
 * another client-node version that needs more loads the index as before (it
 * costs memory, never a failed start).
 */
function lightConfigHooks(): { deregister(): void } | null {
  let configUrl: string;
  try {
    const configPath = createRequire(import.meta.url).resolve('@kubernetes/client-node/dist/config.js');
    configUrl = pathToFileURL(configPath).href;
    const source = readFileSync(configPath, 'utf8');
    const imports = [...source.matchAll(/import\s*\{([^}]*)\}\s*from\s*'\.\/gen\/index\.js'/g)];
    const names = imports
      .flatMap((m) =>
        m[1]
          .split(',')
          .map((n) => n.trim())
          .filter(Boolean),
      )
      .sort();
    if (imports.length !== 1 || names.join() !== GEN_INDEX_NAMES.join() || /from\s*'\.\/gen\/index\.js'/.test(source.replace(imports[0][0], ''))) return null;
  } catch {
    return null; // an unexpected layout: the full index it is
  }
  // gen-config.ts here, gen-config.js once built: the same extension as this module's.
  const light = new URL(`./gen-config${import.meta.url.slice(import.meta.url.lastIndexOf('.'))}`, import.meta.url).href;
  return registerHooks({
    resolve(specifier, context, next) {
      if (specifier === './gen/index.js' && context.parentURL === configUrl) return { url: light, shortCircuit: true };
      return next(specifier, context);
    },
  });
}
