/** Route is a page of the dashboard, parsed from the URL hash ("#/services/shop/web"). */
export type Route =
  | { readonly page: 'overview' }
  | { readonly page: 'services'; readonly q: string }
  | { readonly page: 'service'; readonly namespace: string; readonly name: string }
  | { readonly page: 'rules'; readonly table: string; readonly chain: string | null; readonly q: string; readonly drift?: boolean; readonly rule?: number }
  | { readonly page: 'trace'; readonly query: TraceForm }
  | { readonly page: 'syncs' }
  | { readonly page: 'actions' }
  | { readonly page: 'connections'; readonly q: string };

/** TraceForm is the Trace page's packet as typed (empty fields not yet filled). */
export interface TraceForm {
  readonly proto: string;
  readonly src: string;
  readonly dst: string;
  readonly from: string;
}

export const PAGES = ['overview', 'services', 'rules', 'trace', 'syncs', 'actions'] as const;
/** RELAY_PAGES: the pages of the userspace mode only (the relay's open connections). */
export const RELAY_PAGES = ['connections'] as const;
/** parseRoute reads a location hash; anything unknown is the overview. */
export function parseRoute(hash: string): Route {
  const [path, query = ''] = hash.replace(/^#\/?/, '').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query);
  switch (parts[0]) {
    case 'services':
      if (parts.length >= 3) return { page: 'service', namespace: parts[1], name: parts[2] };
      return { page: 'services', q: params.get('q') ?? '' };
    case 'rules': {
      const rule = Number(params.get('rule'));
      const at = parts[2] && params.has('rule') && Number.isInteger(rule) && rule >= 0 ? { rule } : {};
      return { page: 'rules', table: parts[1] ?? 'nat', chain: parts[2] ?? null, q: params.get('q') ?? '', drift: params.has('drift'), ...at };
    }
    case 'trace':
      return { page: 'trace', query: { proto: params.get('proto') ?? 'tcp', src: params.get('src') ?? '', dst: params.get('dst') ?? '', from: params.get('from') ?? '' } };
    case 'syncs':
      return { page: 'syncs' };
    case 'actions':
      return { page: 'actions' };
    case 'connections':
      return { page: 'connections', q: params.get('q') ?? '' };
    default:
      return { page: 'overview' };
  }
}

/** href builds the hash of a route. */
export function href(r: Route): string {
  const e = encodeURIComponent;
  switch (r.page) {
    case 'overview':
      return '#/';
    case 'services':
      return r.q ? `#/services?q=${e(r.q)}` : '#/services';
    case 'service':
      return `#/services/${e(r.namespace)}/${e(r.name)}`;
    case 'rules': {
      const query = [r.q ? `q=${e(r.q)}` : '', r.drift ? 'drift' : '', r.chain && r.rule !== undefined ? `rule=${r.rule}` : ''].filter(Boolean).join('&');
      return `#/rules/${e(r.table)}${r.chain ? `/${e(r.chain)}` : ''}${query ? `?${query}` : ''}`;
    }
    case 'connections':
      return r.q ? `#/connections?q=${e(r.q)}` : '#/connections';
    case 'trace': {
      const query = (['proto', 'src', 'dst', 'from'] as const)
        .filter((k) => r.query[k])
        .map((k) => `${k}=${e(r.query[k])}`)
        .join('&');
      return `#/trace${query ? `?${query}` : ''}`;
    }
    default:
      return `#/${r.page}`;
  }
}

/** Router follows location.hash. */
export class Router {
  route = $state.raw<Route>({ page: 'overview' });
  readonly #onHash = () => (this.route = parseRoute(location.hash));

  start(): () => void {
    this.#onHash();
    addEventListener('hashchange', this.#onHash);
    return () => removeEventListener('hashchange', this.#onHash);
  }

  go(r: Route, replace = false): void {
    const h = href(r);
    if (replace) history.replaceState(null, '', h);
    else location.hash = h;
    this.route = r;
  }
}
