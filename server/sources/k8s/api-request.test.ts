import { describe, expect, it } from 'vitest';
import { ApiStatusError, KubeApi, LIST_PAGE } from './api-request.ts';

/** pagedApi: a KubeApi whose requests are answered from `pages` (by continue token), recording each request's query. */
function pagedApi(answer: (query: Record<string, unknown>) => unknown) {
  const api = new KubeApi({ getCurrentCluster: () => ({ server: 'https://api.test' }) } as never, { HttpLibrary: class {} } as never);
  const queries: Record<string, unknown>[] = [];
  api.request = <T>(_method: string, _path: string, o: { query?: Record<string, unknown> } = {}): Promise<T> => {
    queries.push(o.query ?? {});
    try {
      return Promise.resolve(answer(o.query ?? {}) as T);
    } catch (err) {
      return Promise.reject(err as Error);
    }
  };
  return { api, queries };
}

const page = (items: string[], next?: string) => ({ kind: 'ServiceList', apiVersion: 'v1', metadata: { resourceVersion: '7', ...(next ? { continue: next } : {}) }, items });

describe('KubeApi.list', () => {
  it('asks for the next page before keeping the items of this one, so the server prepares it meanwhile', async () => {
    const { api, queries } = pagedApi((q) => (q.continue === undefined ? page(['a', 'b'], 'p2') : q.continue === 'p2' ? page(['c'], 'p3') : page(['d'])));
    const askedWhenKept: Record<string, number> = {};
    const list = await api.list('/api/v1/services', { labelSelector: 'x' }, (item) => {
      askedWhenKept[item as string] = queries.length;
      return `kept ${String(item)}`;
    });
    expect(list).toEqual({ kind: 'ServiceList', apiVersion: 'v1', metadata: { resourceVersion: '7' }, items: ['kept a', 'kept b', 'kept c', 'kept d'] });
    expect(askedWhenKept).toEqual({ a: 2, b: 2, c: 3, d: 3 });
    expect(queries).toEqual([
      { labelSelector: 'x', limit: LIST_PAGE, continue: undefined },
      { labelSelector: 'x', limit: LIST_PAGE, continue: 'p2' },
      { labelSelector: 'x', limit: LIST_PAGE, continue: 'p3' },
    ]);
  });

  it('lists again in one request, without the pages before, when a continue token expired', async () => {
    const { api, queries } = pagedApi((q) => {
      if (q.continue === 'p2') throw new ApiStatusError('GET', '/api/v1/services', 410, '{"message":"too old"}');
      return q.limit === undefined ? page(['a', 'b', 'c']) : page(['a'], 'p2');
    });
    const list = await api.list('/api/v1/services', {}, (item) => item);
    expect(list.items).toEqual(['a', 'b', 'c']);
    expect(queries.map((q) => [q.limit, q.continue])).toEqual([
      [LIST_PAGE, undefined],
      [LIST_PAGE, 'p2'],
      [undefined, undefined],
    ]);
  });

  it('fails with the error of a page other than an expired continue token', async () => {
    const { api } = pagedApi((q) => {
      if (q.continue === 'p2') throw new ApiStatusError('GET', '/api/v1/services', 500, '{"message":"etcd is down"}');
      return page(['a'], 'p2');
    });
    await expect(api.list('/api/v1/services', {}, (item) => item)).rejects.toThrow('HTTP 500: etcd is down');
  });
});
